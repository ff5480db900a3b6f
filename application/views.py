"""What ``status`` shows: a saga folded from its log, as a JSON-friendly model."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from events.saga_log.port import LoadedSaga
from saga_core.contracts import StepKind
from saga_core.engine.resolved_commands import redacted_arguments
from saga_core.engine.state import RunStatus, StepRun, error_recovered
from saga_core.engine.stops import budget_summary
from saga_core.errors import TemplateError


class RunView(BaseModel):
    """One operation (a step's forward or compensation run) as an operator sees it."""

    model_config = ConfigDict(frozen=True)

    step_id: str
    kind: StepKind
    status: RunStatus
    attempt: int
    operation_key: str
    receipt: dict[str, Any] | None = None
    error_class: str | None = None
    error_message: str = ""
    # The run succeeded after that error (a retry, a reconciliation): it is history.
    error_recovered: bool = False
    lease_expires_at: datetime | None = None
    not_before: datetime | None = None
    approval: dict[str, Any] | None = None


class SagaView(BaseModel):
    """A saga's state, definition, steps, pending approvals and escalation."""

    model_config = ConfigDict(frozen=True)

    saga_id: str
    tenant: str
    status: str
    terminal: bool
    definition: str
    definition_version: int
    version: int
    retry_budget_left: int
    cancel_requested: bool
    escalation: dict[str, Any] | None = None
    # Time limit, deadline, cost budget, spent, remaining, a breach (None: no limits).
    budget: dict[str, Any] | None = None
    steps: list[RunView]
    pending_approvals: list[dict[str, Any]]


def _run_view(run: StepRun) -> RunView:
    approval = None
    if run.approval is not None:
        approval = {
            "action_hash": run.approval.action_hash,
            "scope": run.approval.scope,
            "status": run.approval.status,
            "expires_at": run.approval.expires_at.isoformat(),
            "approver": run.approval.approver,
            # The saga version the answer was recorded at (None: not answered yet).
            "answered_version": run.approval.answered_version,
        }
    return RunView(
        step_id=run.step_id,
        kind=run.kind,
        status=run.status,
        attempt=run.attempt,
        operation_key=run.operation_key,
        receipt=run.receipt.model_dump(mode="json") if run.receipt else None,
        error_class=str(run.error_class) if run.error_class else None,
        error_message=run.error_message,
        error_recovered=bool(run.error_class or run.error_message) and error_recovered(run.status),
        lease_expires_at=run.lease_expires_at,
        not_before=run.not_before,
        approval=approval,
    )


def view_of(loaded: LoadedSaga) -> SagaView:
    """The status view of a loaded saga (secret inputs never shown)."""
    return SagaView(**view_fields(loaded))


def view_fields(loaded: LoadedSaga) -> dict[str, Any]:
    """The fields of :func:`view_of`, for a view that adds its own (a start's ``Started``)
    without building the status view, dumping it and validating it again."""
    state = loaded.state
    runs = [*state.forward.values()]
    runs += [r for r in state.compensation.values() if r.status is not RunStatus.PENDING]
    pending = []
    for run in runs:
        if run.status is RunStatus.AWAITING_APPROVAL and run.approval is not None:
            try:
                args = redacted_arguments(state, run.step_id, run.kind)
            except TemplateError:
                args = {}
            pending.append({
                "step_id": run.step_id,
                "kind": run.kind.value,
                "action_hash": run.approval.action_hash,
                "scope": run.approval.scope,
                "expires_at": run.approval.expires_at.isoformat(),
                "arguments": args,
            })
    escalation = None
    if state.escalation is not None:
        escalation = {
            "reason": state.escalation.reason,
            "step_id": state.escalation.step_id,
            "kind": state.escalation.kind.value if state.escalation.kind else None,
            "at": state.escalation.at.isoformat(),
        }
    return dict(
        saga_id=loaded.saga_id,
        tenant=state.tenant,
        status=str(state.status),
        terminal=state.status.is_terminal,
        definition=loaded.definition.name,
        definition_version=loaded.definition.version,
        version=loaded.version,
        retry_budget_left=state.retry_budget_left,
        cancel_requested=state.cancel_requested,
        escalation=escalation,
        budget=budget_summary(state),
        steps=[_run_view(r) for r in runs],
        pending_approvals=pending,
    )
