"""The saga's domain events: immutable facts, each with a type name and schema version.

Every event carries ``at`` (aware UTC) supplied by the caller; saga_core never reads a clock.
The envelope (stream id, position, metadata) belongs to ``events/``; these are only the facts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from saga_core.agents.lineage import Lineage
from saga_core.contracts import ErrorClass, Receipt, SagaStatus, StepKind
from saga_core.definitions.conditions import DeadlinePolicy
from saga_core.errors import EventRejected


class Evidence(BaseModel):
    """What a human needs to decide: the action, resource, receipt, reason, risk and options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    intended_action: str
    affected_resource: str | None = None
    forward_receipt: Receipt | None = None
    reason: str
    expected_result: str = ""
    residual_risk: str = ""
    deadline: AwareDatetime | None = None
    alternatives: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)


class SagaEvent(BaseModel):
    """Base of every saga event: frozen, typed, versioned, timestamped by the caller."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_type: ClassVar[str] = "SagaEvent"
    schema_version: ClassVar[int] = 1

    at: AwareDatetime

    @field_validator("at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.astimezone(UTC)


class StepEvent(SagaEvent):
    """An event about one step's forward or compensation operation."""

    step_id: str
    kind: StepKind


class SagaStarted(SagaEvent):
    """A saga began: which definition (by hash), the validated input, who asked and the budget."""

    event_type: ClassVar[str] = "SagaStarted"

    saga_id: str = Field(min_length=1)
    tenant: str = ""
    definition_name: str
    definition_version: int
    definition_hash: str
    input: dict[str, Any]
    input_hash: str
    idempotency_key: str | None = None
    actor: str = ""
    reason: str = ""
    retry_budget: int = Field(ge=0)
    # Who and what asked (agent request, model, prompt, trace): None on sagas started
    # before lineage existed, which are stored and fold exactly as they were.
    lineage: Lineage | None = None

    @model_serializer(mode="wrap")
    def _omit_no_lineage(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("lineage") is None:
            data.pop("lineage", None)
        return data


class StepScheduled(StepEvent):
    """An attempt is due at ``not_before`` (delays live in the log, not in broker ETAs)."""

    event_type: ClassVar[str] = "StepScheduled"

    attempt: int = Field(ge=1)
    not_before: AwareDatetime
    reason: str
    spends_retry_budget: bool = False


class StepStarted(StepEvent):
    """A worker claimed the attempt and persisted its intent before calling the tool."""

    event_type: ClassVar[str] = "StepStarted"

    attempt: int = Field(ge=1)
    operation_key: str
    request_hash: str
    worker_id: str
    lease_expires_at: AwareDatetime
    # When this call times out (the step's declared timeout from the claim); None: only the
    # lease bounds it (and claims recorded before step timeouts existed).
    timeout_at: AwareDatetime | None = None

    @model_serializer(mode="wrap")
    def _omit_no_timeout(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Without a timeout a claim is stored exactly as before timeouts existed.
        data = handler(self)
        if isinstance(data, dict) and data.get("timeout_at") is None:
            data.pop("timeout_at", None)
        return data


class StepSucceeded(StepEvent):
    """The effect is confirmed, with the provider's receipt (by execution or reconciliation)."""

    event_type: ClassVar[str] = "StepSucceeded"

    attempt: int = Field(ge=1)
    operation_key: str
    receipt: Receipt
    via: Literal["execute", "reconcile"] = "execute"


class StepFailed(StepEvent):
    """The tool answered with a classified, definite failure."""

    event_type: ClassVar[str] = "StepFailed"

    attempt: int = Field(ge=1)
    operation_key: str
    error_class: ErrorClass
    message: str = ""


class StepOutcomeUnknown(StepEvent):
    """The call may or may not have taken effect (timeout after dispatch, lease expired)."""

    event_type: ClassVar[str] = "StepOutcomeUnknown"

    attempt: int = Field(ge=1)
    operation_key: str
    reason: Literal["timeout", "lease_expired", "ambiguous", "crash"]
    detail: str = ""


class ReconciliationScheduled(StepEvent):
    """A lookup by operation key is due at ``not_before``."""

    event_type: ClassVar[str] = "ReconciliationScheduled"

    attempt: int = Field(ge=1)
    not_before: AwareDatetime
    reason: str


class ReconciliationResult(StepEvent):
    """What the lookup by key saw: found (with receipt), confirmed absent, or still unknown."""

    event_type: ClassVar[str] = "ReconciliationResult"

    attempt: int = Field(ge=1)
    operation_key: str
    result: Literal["found", "absent", "unknown"]
    receipt: Receipt | None = None
    detail: str = ""


class PostconditionObserved(StepEvent):
    """The tool's declared postcondition was observed: the receipt may now advance the saga
    (``receipt`` is the one that showed it: the call's own, or the one a lookup found)."""

    event_type: ClassVar[str] = "PostconditionObserved"

    attempt: int = Field(ge=1)
    operation_key: str
    how: Literal["lookup", "receipt"]
    receipt: Receipt
    detail: str = ""


class PostconditionNotObserved(StepEvent):
    """A receipt arrived but its postcondition was not observed within its horizon: the
    operation stays in doubt and is never advanced on the receipt alone."""

    event_type: ClassVar[str] = "PostconditionNotObserved"

    attempt: int = Field(ge=1)
    operation_key: str
    horizon_end: AwareDatetime
    reason: str


DeadlineKind = Literal["step_timeout", "compensation_deadline"]


class DeadlineMissed(StepEvent):
    """A declared time passed: a call ran past its step timeout (its outcome is now unknown)
    or a compensation was not done by its deadline; ``policy`` is what follows."""

    event_type: ClassVar[str] = "DeadlineMissed"

    attempt: int = Field(ge=0)
    deadline_kind: DeadlineKind
    deadline: AwareDatetime
    policy: DeadlinePolicy
    reason: str


class ApprovalRequested(StepEvent):
    """A human must approve this exact action (by hash) within ``scope`` before ``expires_at``."""

    event_type: ClassVar[str] = "ApprovalRequested"

    action_hash: str
    scope: str
    evidence: Evidence
    expires_at: AwareDatetime
    # Who may answer (saga_core.approval.policy); None in requests recorded before gates.
    role: str | None = None
    risk_class: str | None = None
    four_eyes: bool | None = None


class ApprovalGranted(StepEvent):
    """A human approved the action with this hash; the grant itself expires."""

    event_type: ClassVar[str] = "ApprovalGranted"

    action_hash: str
    approver: str = Field(min_length=1)
    expires_at: AwareDatetime
    # The approver's roles that allowed it and the largest amount the grant covers (None:
    # the action it is bound to by hash); empty in grants recorded before gates.
    roles: list[str] = Field(default_factory=list)
    up_to: float | None = None
    # Why the approver said yes (the console asks for it; empty in grants recorded before).
    reason: str = ""


class ApprovalDenied(StepEvent):
    """A human refused the action with this hash."""

    event_type: ClassVar[str] = "ApprovalDenied"

    action_hash: str
    approver: str = Field(min_length=1)
    reason: str = ""
    roles: list[str] = Field(default_factory=list)


class CompensationStarted(SagaEvent):
    """Forward work stops; completed steps are undone in dependency order."""

    event_type: ClassVar[str] = "CompensationStarted"

    reason: str
    failed_step: str | None = None


LimitName = Literal["time", "cost"]


class BudgetExceeded(SagaEvent):
    """A saga's time limit passed or its cost budget would be exceeded: forward work stops
    (``spent``/``allowed`` are seconds since the start for ``time``, cost for ``cost``)."""

    event_type: ClassVar[str] = "BudgetExceeded"

    limit: LimitName
    spent: float
    allowed: float
    reason: str
    step_id: str | None = None


class CancelRequested(SagaEvent):
    """An operator asked to cancel: compensate before the pivot, finish forward after it."""

    event_type: ClassVar[str] = "CancelRequested"

    actor: str
    reason: str = ""


class ManualInterventionRequired(SagaEvent):
    """The orchestrator cannot prove a safe next step; it pauses with evidence for a human."""

    event_type: ClassVar[str] = "ManualInterventionRequired"

    reason: str
    step_id: str | None = None
    kind: StepKind | None = None
    evidence: Evidence


OperatorActionName = Literal[
    "retry_step", "retry_as_new_operation", "mark_compensated", "skip", "force_complete", "resume",
    "run_correction",
]


class OperatorAction(SagaEvent):
    """A typed human action that resolves a manual intervention, with evidence."""

    event_type: ClassVar[str] = "OperatorAction"

    action: OperatorActionName
    step_id: str | None = None
    kind: StepKind = StepKind.FORWARD
    actor: str = Field(min_length=1)
    reason: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)
    # force_complete may record the receipt the operator verified out of band.
    receipt: Receipt | None = None


class PlanRevised(SagaEvent):
    """An agent's revised plan became the saga's next plan version (saga_core.agents.replans).

    It carries the definition the saga runs from now on (the revised plan's steps plus the
    dropped actions that ran, kept so their compensation can run) so the fold needs nothing
    outside the log. ``kept`` actions keep their step id and operation key; ``dropped`` ones
    ran and are compensated; ``removed`` ones never ran and simply go; ``added`` ones run.
    """

    event_type: ClassVar[str] = "PlanRevised"

    revision: int = Field(ge=1)
    plan_hash: str
    definition: dict[str, Any]
    definition_hash: str
    kept: list[str] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    actor: str = ""
    reason: str = ""


class SagaFinished(SagaEvent):
    """The saga reached an honest terminal state."""

    event_type: ClassVar[str] = "SagaFinished"

    state: SagaStatus
    summary: str = ""

    @field_validator("state")
    @classmethod
    def _terminal(cls, value: SagaStatus) -> SagaStatus:
        if not value.is_terminal:
            raise ValueError(f"{value} is not a terminal state")
        return value


_ALL: tuple[type[SagaEvent], ...] = (
    SagaStarted,
    StepScheduled,
    StepStarted,
    StepSucceeded,
    StepFailed,
    StepOutcomeUnknown,
    ReconciliationScheduled,
    ReconciliationResult,
    ApprovalRequested,
    ApprovalGranted,
    ApprovalDenied,
    CompensationStarted,
    CancelRequested,
    ManualInterventionRequired,
    OperatorAction,
    SagaFinished,
    BudgetExceeded,
    PostconditionObserved,
    PostconditionNotObserved,
    DeadlineMissed,
    PlanRevised,
)

#: Every saga event type by its stable type name (the event store's registry starts here).
SAGA_EVENT_TYPES: dict[str, type[SagaEvent]] = {cls.event_type: cls for cls in _ALL}


def load_event(event_type: str, data: dict[str, Any]) -> SagaEvent:
    """Rebuild a saga event from its type name and JSON data (schema version 1)."""
    cls = SAGA_EVENT_TYPES.get(event_type)
    if cls is None:
        raise EventRejected(f"unknown saga event type {event_type!r}")
    return cls.model_validate(data)


def dump_event(event: SagaEvent) -> dict[str, Any]:
    """An event's JSON data (without its type name, which the envelope carries)."""
    return event.model_dump(mode="json")
