"""Audit replay: a saga's whole timeline from the log and its state as of any position.

Everything comes from the saga's stream (never from a read model), and secret inputs are
masked in every field shown. On the way the stream gets the checks ``verify`` gives it
(:mod:`projections.integrity`): its chain and head, its snapshot re-folded, and the
checkpoints that bear on it (with the key, the high-water mark and the age of unanchored
events the caller passes), so a saga ``verify`` flags never audits as intact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events import Position, RecordedEvent
from events.definition_store.port import check_tenant
from events.eventstore.traces import SAGA_TRACE_KEY
from events.integrity.anchor_audit import AnchorReport
from events.saga_log.snapshots import PostgresSnapshots
from events.saga_log.streams import CorruptSagaStream, SagaNotFound, saga_stream
from projections.context import ProjectionContext
from projections.integrity import IntegrityChecks, check_anchors, check_stream, saga_codec
from projections.masking import mask, mask_input
from projections.record import replay
from projections.rows import SagaRows, rows_of
from saga_core.engine.events import SagaEvent, SagaStarted
from saga_core.engine.state import SagaState
from saga_core.engine.state_codec import SCHEMA as SNAPSHOT_SCHEMA


@dataclass(frozen=True)
class TimelineEntry:
    """One event of the saga as an auditor reads it."""

    stream_version: int
    position: str
    global_position: int
    type: str
    at: datetime
    recorded_at: datetime
    actor: str | None
    step_id: str | None
    kind: str | None
    operation_key: str | None
    receipt: dict[str, Any] | None
    approval: dict[str, Any] | None
    event_hash: str
    prev_hash: str
    data: dict[str, Any]
    trace_id: str | None = None
    """The trace the event belongs to: the OpenTelemetry trace its writer was in
    (``application.telemetry.tracing``), else the saga's lineage trace (``saga_trace_id``)."""


@dataclass(frozen=True)
class BudgetStanding:
    """A saga's stop conditions as of the audit's position: what the definition allows,
    what its calls cost so far, the breach if one was recorded, whether a person lifted it."""

    time_limit_s: float | None
    max_cost: float | None
    on_exceeded: str | None
    spent: str
    breach: str | None
    breach_reason: str | None
    lifted: bool
    retry_budget_left: int
    cancel_requested: bool


@dataclass(frozen=True)
class AuditReport:
    """The timeline up to ``at``, the chain check, and the state folded up to ``at``."""

    saga_id: str
    at: str | None
    events_total: int
    # The definition's business invariant in plain language ("" when it states none).
    invariant: str
    chain_ok: bool
    chain_break: str | None
    timeline: list[TimelineEntry]
    state: SagaRows | None
    # Who and what asked (saga_core.agents.lineage: agent request, model, prompt, trace) and the
    # tool-contract snapshot it ran against (the definition's hash); lineage is None for a
    # saga started before lineage existed.
    lineage: dict[str, Any] | None = None
    definition_hash: str = ""
    # The first stream version the chain check could not vouch for (it and every later one).
    chain_break_version: int | None = None
    budget: BudgetStanding | None = None
    # Why the saga's snapshot is not the fold it claims to be (None: it is, or there is none).
    snapshot_problem: str | None = None
    # The checkpoints that bear on the saga's stream, checked as verify checks them.
    anchors: AnchorReport | None = None

    @property
    def ok(self) -> bool:
        """Chain, head, snapshot and checkpoints all check out: what verify says too."""
        return (self.chain_ok and self.snapshot_problem is None
                and (self.anchors is None or self.anchors.ok))

    @property
    def tampered(self) -> bool:
        """The log no longer holds what its checkpoints anchored, for this saga."""
        return self.anchors is not None and not self.anchors.ok


def parse_position(text: str) -> Position | int:
    """``N`` (a global position) or ``XID:N`` (a full log position) from the command line."""
    if ":" in text:
        return Position.parse(text)
    return int(text)


def _included(record: RecordedEvent, at: Position | int | None) -> bool:
    if at is None:
        return True
    if isinstance(at, Position):
        return record.position <= at
    return record.position.global_position <= at


def _actor(record: RecordedEvent) -> str | None:
    for source in (record.metadata, record.data):
        for name in ("actor", "approver", "worker_id"):
            value = source.get(name)
            if isinstance(value, str) and value:
                return value
    return None


def _trace_id(record: RecordedEvent) -> str | None:
    for name in ("trace_id", SAGA_TRACE_KEY):
        value = record.metadata.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _approval(event: SagaEvent, data: dict[str, Any]) -> dict[str, Any] | None:
    if "action_hash" not in data:
        return None
    keys = ("action_hash", "scope", "approver", "expires_at", "reason", "evidence")
    return {"event": event.event_type, **{k: data[k] for k in keys if k in data}}


def audit(
    ctx: ProjectionContext, saga_id: str, at: Position | int | None = None, *, tenant: str,
    checks: IntegrityChecks | None = None,
) -> AuditReport:
    """The saga's timeline and state as of ``at`` (all of it when None), its integrity checked
    as verify checks it (``checks``: the key, witness and age for its checkpoints);
    SagaNotFound if it is absent or another tenant's (the two are indistinguishable)."""
    check_tenant(tenant)
    stream_id = saga_stream(saga_id)
    records = ctx.store.read_stream(stream_id)
    if not records:
        raise SagaNotFound(f"no saga {saga_id!r}")
    registry = ctx.store.registry
    assert registry is not None
    events: list[tuple[SagaEvent, int]] = []
    timeline: list[TimelineEntry] = []
    first = registry.decode(records[0])
    if not isinstance(first, SagaStarted):
        raise CorruptSagaStream(f"saga {saga_id!r} does not start with SagaStarted")
    if first.tenant != tenant:
        raise SagaNotFound(f"no saga {saga_id!r}")  # not even its chain's state is shown
    snapshot = PostgresSnapshots(ctx.store).read_snapshots([stream_id], SNAPSHOT_SCHEMA)
    integrity = check_stream(ctx, stream_id, records, snapshot.get(stream_id), saga_codec(ctx))
    anchors = check_anchors(ctx, checks or IntegrityChecks(), stream_id)
    broken = integrity.chain_break
    definition = ctx.definitions.by_hash(first.definition_hash)
    record = replay(definition, [(first, records[0].stream_version)])
    secrets = record.secrets if record else ()
    for recorded in records:
        if not _included(recorded, at):
            continue
        event = registry.decode(recorded)
        if not isinstance(event, SagaEvent):
            raise CorruptSagaStream(f"{stream_id}@{recorded.stream_version}: not a saga event")
        events.append((event, recorded.stream_version))
        data = dict(recorded.data)
        if isinstance(event, SagaStarted):
            data["input"] = mask_input(definition, event.input)
        data = mask(data, secrets)
        timeline.append(
            TimelineEntry(
                stream_version=recorded.stream_version,
                position=str(recorded.position),
                global_position=recorded.position.global_position,
                type=recorded.type,
                at=event.at,
                recorded_at=recorded.recorded_at,
                actor=_actor(recorded),
                step_id=data.get("step_id"),
                kind=data.get("kind"),
                operation_key=data.get("operation_key"),
                receipt=data.get("receipt"),
                approval=_approval(event, data),
                event_hash=recorded.event_hash,
                prev_hash=recorded.prev_hash,
                data=data,
                trace_id=_trace_id(recorded),
            )
        )
    folded = replay(definition, events) if events else None
    budget = _standing(folded.state, secrets) if folded is not None else None
    return AuditReport(
        saga_id=saga_id,
        at=str(at) if at is not None else None,
        events_total=len(records),
        invariant=definition.invariant,
        chain_ok=broken is None,
        chain_break=f"version {broken.stream_version}: {broken.reason}" if broken else None,
        timeline=timeline,
        state=rows_of(folded) if folded is not None else None,
        lineage=first.lineage.model_dump(exclude_none=True) if first.lineage else None,
        definition_hash=first.definition_hash,
        chain_break_version=broken.stream_version if broken else None,
        budget=budget,
        snapshot_problem=integrity.snapshot_problem,
        anchors=anchors,
    )


def _standing(state: SagaState, secrets: tuple[str, ...]) -> BudgetStanding:
    limits = state.definition.budget
    ledger = state.budget
    return BudgetStanding(
        time_limit_s=limits.time_limit_s if limits else None,
        max_cost=limits.max_cost if limits else None,
        on_exceeded=str(limits.on_exceeded) if limits else None,
        spent=str(ledger.spent),
        breach=str(ledger.breach.limit) if ledger.breach else None,
        breach_reason=mask(ledger.breach.reason, secrets) if ledger.breach else None,
        lifted=ledger.lifted,
        retry_budget_left=state.retry_budget_left,
        cancel_requested=state.cancel_requested,
    )
