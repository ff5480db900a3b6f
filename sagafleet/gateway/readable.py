"""Compact, LLM-readable forms of a saga: its status and its audit timeline from the log.

Secret inputs (``InputField.secret``) and secret tool arguments never appear in clear: the
input is redacted by field, and every other string is scrubbed of the values the log or the
definition holds in clear (older sagas); the service then looks for the vault's values of
every saga an answer names (``GatewayService``, ``application.secrets.guard``), so a receipt or
an error message that echoes one cannot leak it either.
"""

from __future__ import annotations

from typing import Any

from application.secrets.guard import in_clear
from application.views import SagaView
from events import verify_chain
from events.saga_log.port import LoadedSaga, SagaHistory
from events.saga_log.streams import saga_stream
from saga_core.engine.events import SagaStarted
from saga_core.secret_scrub import SCRUBBED, SecretNeedles, scrub_document

REDACTED = SCRUBBED
_EMPTY: tuple[Any, ...] = (None, "", False, [], {})
# Event fields an LLM does not need to follow a saga (hashes, keys, leases).
_NOISE = frozenset({
    "at", "operation_key", "request_hash", "input_hash", "definition_hash", "lease_expires_at",
    "saga_id", "tenant", "retry_budget", "action_hash",
})


def scrub(report: dict[str, Any], secrets: set[str] | SecretNeedles) -> dict[str, Any]:
    """``report`` with every secret value replaced by a marker (``saga_core.secret_scrub``)."""
    needles = secrets if isinstance(secrets, SecretNeedles) else SecretNeedles.of(secrets)
    scrubbed: dict[str, Any] = scrub_document(report, needles).value
    return scrubbed


def redacted_input(loaded: LoadedSaga, data: dict[str, Any]) -> dict[str, Any]:
    """The input with secret fields replaced by a marker."""
    fields = loaded.definition.input
    return {k: REDACTED if k in fields and fields[k].secret else v for k, v in data.items()}


def _receipt(receipt: dict[str, Any] | None) -> dict[str, Any] | None:
    if receipt is None:
        return None
    compact = {"resource_id": receipt["resource_id"], "status": receipt.get("status")}
    compact.update(receipt.get("fields") or {})
    return compact


def compact_status(view: SagaView, loaded: LoadedSaga) -> dict[str, Any]:
    """State, steps, receipts and what is pending, in a compact form."""
    steps = []
    for run in view.steps:
        entry: dict[str, Any] = {"step": run.step_id, "kind": run.kind.value,
                                 "status": str(run.status), "attempt": run.attempt}
        if run.receipt is not None:
            entry["receipt"] = _receipt(run.receipt)
        if run.error_class:
            # An error the run recovered from (it succeeded since) is history, not a problem.
            said = "recovered_error" if run.error_recovered else "error"
            entry[said] = f"{run.error_class}: {run.error_message}".rstrip(": ")
        if run.approval is not None and run.approval["status"] == "denied":
            entry["denied_by"] = run.approval["approver"]
        if run.not_before is not None and not view.terminal:
            entry["not_before"] = run.not_before.isoformat()
        steps.append(entry)
    pending = [
        {"waiting_for": "a person's approval (operator command `sagafleet approve`)",
         "step": p["step_id"], "kind": p["kind"], "scope": p["scope"],
         "expires_at": p["expires_at"], "arguments": p["arguments"]}
        for p in view.pending_approvals
    ]
    if view.escalation is not None:
        pending.append({"waiting_for": "an operator (manual intervention)",
                        "reason": view.escalation["reason"],
                        "step": view.escalation["step_id"]})
    report = {
        "saga_id": view.saga_id,
        "definition": f"{view.definition} v{view.definition_version}",
        "status": view.status,
        "terminal": view.terminal,
        "cancel_requested": view.cancel_requested,
        "steps": steps,
        "pending": pending,
    }
    return scrub(report, in_clear(loaded))


def _actor(record_metadata: dict[str, Any], event: dict[str, Any]) -> str | None:
    for key in ("actor", "approver", "worker_id"):
        if event.get(key):
            return str(event[key])
    actor = record_metadata.get("actor")
    return str(actor) if actor else None


def audit_timeline(loaded: SagaHistory) -> dict[str, Any]:
    """Every event of the saga in order, with who recorded it; the hash chain checked."""
    timeline = []
    for event, record in zip(loaded.events, loaded.records, strict=True):
        data = event.model_dump(mode="json")
        entry: dict[str, Any] = {
            "n": record.stream_version,
            "at": record.recorded_at.isoformat(),
            "event": record.type,
        }
        actor = _actor(record.metadata, data)
        if actor:
            entry["actor"] = actor
        for key in ("actor", "approver", "worker_id"):
            data.pop(key, None)
        if isinstance(event, SagaStarted):
            data["input"] = redacted_input(loaded, event.input)
        evidence = data.pop("evidence", None)
        if isinstance(evidence, dict):
            data["evidence"] = {k: evidence[k] for k in ("intended_action", "reason")
                                if evidence.get(k)}
        entry.update({k: v for k, v in data.items() if k not in _NOISE and v not in _EMPTY})
        timeline.append(entry)
    chain = verify_chain(list(loaded.records), saga_stream(loaded.saga_id))
    report = {
        "saga_id": loaded.saga_id,
        "definition": f"{loaded.definition.name} v{loaded.definition.version}",
        "status": str(loaded.state.status),
        "hash_chain_intact": chain.ok,
        "events": timeline,
    }
    return scrub(report, in_clear(loaded))
