"""What the orchestrator decided: each decision maps to exactly one event (``to_event``).

Workers append ``decision.to_event(at=now)`` for each decision, with the stream's expected
version, so two deciders racing cannot both record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from saga_core.contracts import Receipt, SagaStatus, StepKind
from saga_core.definitions.conditions import DeadlinePolicy
from saga_core.engine.events import (
    ApprovalRequested,
    CompensationStarted,
    DeadlineKind,
    DeadlineMissed,
    Evidence,
    ManualInterventionRequired,
    PostconditionNotObserved,
    PostconditionObserved,
    ReconciliationScheduled,
    SagaEvent,
    SagaFinished,
    StepOutcomeUnknown,
    StepScheduled,
    StepSucceeded,
)


class Decision:
    """Base of every decision; ``to_event`` gives the one event that records it."""

    def to_event(self, at: datetime) -> SagaEvent:
        """The event to append for this decision, timestamped ``at``."""
        raise NotImplementedError


@dataclass(frozen=True)
class ScheduleStep(Decision):
    """Run a forward step's attempt from ``not_before`` (its dependencies succeeded)."""

    step_id: str
    attempt: int
    not_before: datetime
    reason: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A StepScheduled for the forward operation."""
        return StepScheduled(
            at=at,
            step_id=self.step_id,
            kind=StepKind.FORWARD,
            attempt=self.attempt,
            not_before=self.not_before,
            reason=self.reason,
        )


@dataclass(frozen=True)
class ScheduleCompensation(Decision):
    """Run a step's compensation (every dependent step's compensation is already settled)."""

    step_id: str
    attempt: int
    not_before: datetime
    reason: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A StepScheduled for the compensation operation."""
        return StepScheduled(
            at=at,
            step_id=self.step_id,
            kind=StepKind.COMPENSATION,
            attempt=self.attempt,
            not_before=self.not_before,
            reason=self.reason,
        )


@dataclass(frozen=True)
class RetryAfterBackoff(Decision):
    """Retry the same operation (same key) after a jittered backoff; spends the retry budget."""

    step_id: str
    kind: StepKind
    attempt: int
    not_before: datetime
    reason: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A StepScheduled that spends one unit of the saga's retry budget."""
        return StepScheduled(
            at=at,
            step_id=self.step_id,
            kind=self.kind,
            attempt=self.attempt,
            not_before=self.not_before,
            reason=self.reason,
            spends_retry_budget=True,
        )


@dataclass(frozen=True)
class DeclareOutcomeUnknown(Decision):
    """A claimed attempt's lease expired without a result: its outcome is ambiguous."""

    step_id: str
    kind: StepKind
    attempt: int
    operation_key: str
    detail: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A StepOutcomeUnknown with reason lease_expired."""
        return StepOutcomeUnknown(
            at=at,
            step_id=self.step_id,
            kind=self.kind,
            attempt=self.attempt,
            operation_key=self.operation_key,
            reason="lease_expired",
            detail=self.detail,
        )


@dataclass(frozen=True)
class Reconcile(Decision):
    """Look the operation up by its key from ``not_before``."""

    step_id: str
    kind: StepKind
    attempt: int
    not_before: datetime
    reason: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A ReconciliationScheduled."""
        return ReconciliationScheduled(
            at=at,
            step_id=self.step_id,
            kind=self.kind,
            attempt=self.attempt,
            not_before=self.not_before,
            reason=self.reason,
        )


@dataclass(frozen=True)
class AcceptReconciledReceipt(Decision):
    """Reconciliation found the effect: record the success with the found receipt."""

    step_id: str
    kind: StepKind
    attempt: int
    operation_key: str
    receipt: Receipt

    def to_event(self, at: datetime) -> SagaEvent:
        """A StepSucceeded with via=reconcile."""
        return StepSucceeded(
            at=at,
            step_id=self.step_id,
            kind=self.kind,
            attempt=self.attempt,
            operation_key=self.operation_key,
            receipt=self.receipt,
            via="reconcile",
        )


@dataclass(frozen=True)
class ObservePostcondition(Decision):
    """The tool's postcondition is observed: the receipt advances the saga."""

    step_id: str
    kind: StepKind
    attempt: int
    operation_key: str
    how: Literal["lookup", "receipt"]
    receipt: Receipt
    detail: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A PostconditionObserved."""
        return PostconditionObserved(
            at=at, step_id=self.step_id, kind=self.kind, attempt=self.attempt,
            operation_key=self.operation_key, how=self.how,
            receipt=self.receipt, detail=self.detail,
        )


@dataclass(frozen=True)
class MissPostcondition(Decision):
    """The horizon passed without the postcondition observed: the operation stays in doubt."""

    step_id: str
    kind: StepKind
    attempt: int
    operation_key: str
    horizon_end: datetime
    reason: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A PostconditionNotObserved."""
        return PostconditionNotObserved(
            at=at, step_id=self.step_id, kind=self.kind, attempt=self.attempt,
            operation_key=self.operation_key, horizon_end=self.horizon_end, reason=self.reason,
        )


@dataclass(frozen=True)
class MissDeadline(Decision):
    """A declared time passed (a call's timeout, a compensation's deadline): record it with
    the policy that follows."""

    step_id: str
    kind: StepKind
    attempt: int
    deadline_kind: DeadlineKind
    deadline: datetime
    policy: DeadlinePolicy
    reason: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A DeadlineMissed."""
        return DeadlineMissed(
            at=at, step_id=self.step_id, kind=self.kind, attempt=self.attempt,
            deadline_kind=self.deadline_kind, deadline=self.deadline, policy=self.policy,
            reason=self.reason,
        )


@dataclass(frozen=True)
class RequestApproval(Decision):
    """Ask a human to approve this exact action (by hash) before it may run."""

    step_id: str
    kind: StepKind
    action_hash: str
    scope: str
    evidence: Evidence
    expires_at: datetime
    role: str | None = None
    risk_class: str | None = None
    four_eyes: bool | None = None

    def to_event(self, at: datetime) -> SagaEvent:
        """An ApprovalRequested naming who may answer it."""
        return ApprovalRequested(
            at=at,
            step_id=self.step_id,
            kind=self.kind,
            action_hash=self.action_hash,
            scope=self.scope,
            evidence=self.evidence,
            expires_at=self.expires_at,
            role=self.role,
            risk_class=self.risk_class,
            four_eyes=self.four_eyes,
        )


@dataclass(frozen=True)
class BeginCompensation(Decision):
    """Stop forward work and undo completed steps in dependency order."""

    reason: str
    failed_step: str | None

    def to_event(self, at: datetime) -> SagaEvent:
        """A CompensationStarted."""
        return CompensationStarted(at=at, reason=self.reason, failed_step=self.failed_step)


@dataclass(frozen=True)
class Escalate(Decision):
    """Pause in MANUAL_INTERVENTION: no safe automatic step can be proven."""

    reason: str
    step_id: str | None
    kind: StepKind | None
    evidence: Evidence

    def to_event(self, at: datetime) -> SagaEvent:
        """A ManualInterventionRequired carrying the evidence."""
        return ManualInterventionRequired(
            at=at,
            reason=self.reason,
            step_id=self.step_id,
            kind=self.kind,
            evidence=self.evidence,
        )


@dataclass(frozen=True)
class Finish(Decision):
    """End the saga in an honest terminal state."""

    state: SagaStatus
    summary: str

    def to_event(self, at: datetime) -> SagaEvent:
        """A SagaFinished."""
        return SagaFinished(at=at, state=self.state, summary=self.summary)


def record(decision: Decision, now: datetime) -> SagaEvent:
    """The one event that records ``decision`` (same as ``decision.to_event(at=now)``)."""
    return decision.to_event(at=now)
