"""The read-model rows of one saga, derived from its :class:`SagaRecord`; pure.

Every field here is a column of the same name in the table set (``projections.*_vN``),
so writing a row and comparing a stored row with a fresh fold are both mechanical.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal

from projections.masking import mask
from projections.record import NO_TALLY, SagaRecord, last_error_recovered
from saga_core.contracts import StepKind
from saga_core.engine.state import RunStatus, StepRun

#: Runs in these states are "current": somebody (a worker, a lookup, a human) is on them.
ACTIVE_RUN_STATES = frozenset(
    {
        RunStatus.AWAITING_APPROVAL,
        RunStatus.SCHEDULED,
        RunStatus.STARTED,
        RunStatus.UNKNOWN,
        RunStatus.RECONCILING,
        RunStatus.FOUND,
        RunStatus.ABSENT,
        RunStatus.RETRY_REQUESTED,
        RunStatus.VERIFYING,  # a receipt waiting for its postcondition to be looked up
    }
)


@dataclass(frozen=True)
class SummaryRow:
    """``saga_summary``: one saga's state, definition, timing, current steps and budget."""

    saga_id: str
    stream_version: int
    tenant: str
    definition_name: str
    definition_version: int
    definition_hash: str
    state: str
    phase: str
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    compensation_started_at: datetime | None
    current_steps: list[str]
    last_error: str
    last_error_class: str | None
    retry_budget_left: int
    cancel_requested: bool
    escalations: int
    escalation_reason: str | None
    # The last error's operation has since succeeded (a retry, a reconciliation): the error
    # is history, not a problem (projections migration 0009 added the column).
    last_error_recovered: bool = False


@dataclass(frozen=True)
class StepRunRow:
    """``step_runs``: one operation's state, attempts, key, receipt, lease and counters."""

    saga_id: str
    step_id: str
    kind: str
    tool: str
    tool_version: int
    semantics: str
    status: str
    attempts: int
    operation_key: str
    receipt: dict[str, Any] | None
    error_class: str | None
    error_message: str
    worker_id: str | None
    lease_expires_at: datetime | None
    starts: int
    successes: int
    distinct_receipts: int
    failures: int
    ambiguous: int
    reconciliations_found: int
    reconciliations_absent: int
    reconciliations_unknown: int
    first_started_at: datetime | None
    succeeded_at: datetime | None
    changed_at: datetime | None
    started_without_approval: bool

    @property
    def key(self) -> tuple[str, str]:
        """(step id, kind) within the saga."""
        return (self.step_id, self.kind)


QueueEntry = Literal["manual_intervention", "approval"]


@dataclass(frozen=True)
class QueueRow:
    """``operator_queue``: one thing a human must decide, with structured evidence."""

    saga_id: str
    entry: str
    step_id: str
    kind: str
    tenant: str
    definition_name: str
    reason: str
    action_hash: str | None
    scope: str | None
    evidence: dict[str, Any]
    deadline: datetime | None
    requested_at: datetime


@dataclass(frozen=True)
class SagaRows:
    """Every read-model row of one saga."""

    summary: SummaryRow
    steps: tuple[StepRunRow, ...]
    queue: tuple[QueueRow, ...]


def columns(row_type: type) -> list[str]:
    """The column names of a row dataclass, in declaration (and table) order."""
    return [f.name for f in fields(row_type)]


def _run_label(run: StepRun) -> str:
    suffix = "" if run.kind is StepKind.FORWARD else "(compensation)"
    return f"{run.step_id}{suffix}:{run.status}"


def _summary(record: SagaRecord) -> SummaryRow:
    state = record.state
    runs = [*state.forward.values(), *state.compensation.values()]
    escalation = state.escalation
    return SummaryRow(
        saga_id=record.saga_id,
        stream_version=record.stream_version,
        tenant=state.tenant,
        definition_name=record.definition.name,
        definition_version=record.definition.version,
        definition_hash=record.definition_hash,
        state=str(state.status),
        phase=state.live_phase or "finished",
        started_at=record.started_at,
        updated_at=record.updated_at,
        finished_at=record.finished_at,
        compensation_started_at=record.compensation_started_at,
        # Nobody is on any operation of a finished saga (an absent effect settled is history).
        current_steps=[] if state.finished is not None else [
            _run_label(r) for r in runs if r.status in ACTIVE_RUN_STATES],
        last_error=mask(record.last_error, record.secrets),
        last_error_class=record.last_error_class,
        retry_budget_left=state.retry_budget_left,
        cancel_requested=state.cancel_requested,
        escalations=record.escalations,
        escalation_reason=mask(escalation.reason, record.secrets) if escalation else None,
        last_error_recovered=last_error_recovered(record),
    )


def _step_row(record: SagaRecord, run: StepRun) -> StepRunRow:
    tally = record.tallies.get((run.step_id, run.kind), NO_TALLY)
    tool, tool_version = record.definition.tool_for(run.step_id, run.kind)
    receipt = run.receipt.model_dump(mode="json") if run.receipt is not None else None
    return StepRunRow(
        saga_id=record.saga_id,
        step_id=run.step_id,
        kind=str(run.kind),
        tool=tool,
        tool_version=tool_version,
        semantics=str(record.definition.step(run.step_id).semantics),
        status=str(run.status),
        attempts=run.attempt,
        operation_key=run.operation_key,
        receipt=mask(receipt, record.secrets),
        error_class=str(run.error_class) if run.error_class is not None else None,
        error_message=mask(run.error_message, record.secrets),
        worker_id=run.worker_id,
        lease_expires_at=run.lease_expires_at,
        starts=tally.starts,
        successes=tally.successes,
        distinct_receipts=len(tally.receipts),
        failures=tally.failures,
        ambiguous=tally.ambiguous,
        reconciliations_found=tally.reconciliations_found,
        reconciliations_absent=tally.reconciliations_absent,
        reconciliations_unknown=tally.reconciliations_unknown,
        first_started_at=tally.first_started_at,
        succeeded_at=tally.succeeded_at,
        changed_at=run.changed_at,
        started_without_approval=tally.started_without_approval,
    )


def _queue(record: SagaRecord) -> tuple[QueueRow, ...]:
    state = record.state
    if state.finished is not None:
        return ()
    entries: list[QueueRow] = []
    common = {
        "saga_id": record.saga_id,
        "tenant": state.tenant,
        "definition_name": record.definition.name,
    }
    escalation = state.escalation
    if escalation is not None:
        evidence = record.escalation_evidence
        deadline = (evidence.deadline if evidence else None) or escalation.at + timedelta(
            seconds=record.definition.escalation_deadline_s
        )
        entries.append(
            QueueRow(
                entry="manual_intervention",
                step_id=escalation.step_id or "",
                kind=str(escalation.kind) if escalation.kind else "",
                reason=mask(escalation.reason, record.secrets),
                action_hash=None,
                scope=None,
                evidence=mask(evidence.model_dump(mode="json"), record.secrets) if evidence else {},
                deadline=deadline,
                requested_at=escalation.at,
                **common,
            )
        )
    for run in [*state.forward.values(), *state.compensation.values()]:
        approval = run.approval
        if run.status is not RunStatus.AWAITING_APPROVAL or approval is None:
            continue
        if approval.status != "requested":
            continue
        evidence = record.approval_evidence.get((run.step_id, run.kind))
        entries.append(
            QueueRow(
                entry="approval",
                step_id=run.step_id,
                kind=str(run.kind),
                reason=mask(evidence.reason, record.secrets) if evidence else approval.scope,
                action_hash=approval.action_hash,
                scope=approval.scope,
                evidence=mask(evidence.model_dump(mode="json"), record.secrets) if evidence else {},
                deadline=(evidence.deadline if evidence else None) or approval.expires_at,
                requested_at=approval.requested_at,
                **common,
            )
        )
    return tuple(entries)


def rows_of(record: SagaRecord) -> SagaRows:
    """Every read-model row of a saga: summary, touched operations, queue entries."""
    state = record.state
    # Every forward operation is shown (pending ones too); compensations once they moved.
    runs = [*state.forward.values()]
    runs += [r for r in state.compensation.values() if r.status is not RunStatus.PENDING]
    return SagaRows(
        summary=_summary(record),
        steps=tuple(_step_row(record, run) for run in runs),
        queue=_queue(record),
    )
