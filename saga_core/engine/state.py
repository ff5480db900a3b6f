"""Saga state and its fold: ``evolve(state, event) -> state`` is pure and never mutates its input.

State is a frozen dataclass over frozen step runs; each evolve returns a new state sharing the
untouched runs. Interpretation (what to do next) lives in :mod:`saga_core.engine.decide`; evolve
only
records facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, NamedTuple, TypeVar

from saga_core.contracts import ErrorClass, Receipt, SagaStatus, StepKind
from saga_core.definitions.budgets import NO_LEDGER, BudgetLedger, charged, lifted, with_breach
from saga_core.definitions.definition import SagaDefinition
from saga_core.definitions.derived import Derived
from saga_core.engine.events import (
    ApprovalDenied,
    ApprovalGranted,
    ApprovalRequested,
    BudgetExceeded,
    CancelRequested,
    CompensationStarted,
    DeadlineMissed,
    ManualInterventionRequired,
    OperatorAction,
    PlanRevised,
    PostconditionNotObserved,
    PostconditionObserved,
    ReconciliationResult,
    ReconciliationScheduled,
    SagaEvent,
    SagaFinished,
    SagaStarted,
    StepEvent,
    StepFailed,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
    StepSucceeded,
)
from saga_core.errors import DefinitionMismatchError, EventRejected
from saga_core.keys import key_after_head, key_text_after_saga, operation_key, saga_key_head

_Record = TypeVar("_Record")


def replace(record: _Record, **changes: Any) -> _Record:
    """``dataclasses.replace`` for the frozen, slot-less, validator-free records below.

    A fold replaces several records per event; skipping the frozen ``__init__`` (one
    ``object.__setattr__`` per field) makes folding several times faster. Unknown field
    names are still refused, as ``dataclasses.replace`` would.
    """
    fields = record.__dataclass_fields__  # type: ignore[attr-defined]
    for name in changes:
        if name not in fields:
            unknown = sorted(changes.keys() - fields.keys())
            raise TypeError(f"{type(record).__name__} has no field(s) {unknown}")
    clone = object.__new__(type(record))
    attributes = clone.__dict__
    attributes.update(record.__dict__)
    attributes.update(changes)
    return clone


class RunStatus(StrEnum):
    """Where one forward or compensation operation of a step stands."""

    PENDING = "pending"
    AWAITING_APPROVAL = "awaiting_approval"
    # A person denied the request: the run is answered, never waiting (decide compensates
    # before the pivot, else a person resolves it).
    DENIED = "denied"
    SCHEDULED = "scheduled"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RECONCILING = "reconciling"
    FOUND = "found"  # reconciliation found the effect; StepSucceeded(via=reconcile) is next
    ABSENT = "absent"  # reconciliation confirmed absence (which proves nothing about late commits)
    RETRY_REQUESTED = "retry_requested"  # an operator asked for another attempt
    SKIPPED = "skipped"  # an operator chose to leave this operation undone
    FORCED = "forced"  # an operator declared it done (force_complete / mark_compensated)
    # A receipt arrived, but the tool's postcondition is not observed yet
    # (saga_core.engine.condition_rules).
    VERIFYING = "verifying"
    # The saga stopped waiting for it before it ran (forward work stopped for compensation,
    # or the saga finished): a scheduled attempt or an open request that never will run.
    WITHDRAWN = "withdrawn"


#: A forward run in one of these lets its dependents proceed.
FORWARD_DONE = frozenset({RunStatus.SUCCEEDED, RunStatus.FORCED, RunStatus.SKIPPED})
#: A forward or compensation run whose effect may exist but is not yet proven either way.
IN_DOUBT = frozenset(
    {RunStatus.STARTED, RunStatus.UNKNOWN, RunStatus.RECONCILING, RunStatus.FOUND, RunStatus.ABSENT,
     RunStatus.VERIFYING}
)


def error_recovered(status: str) -> bool:
    """Whether an error recorded on a run now in ``status`` was recovered from: the run went
    on to succeed by itself (a retry, or a lookup that found its effect). Forced, skipped or
    compensated around by a person is not recovered: that error stays an error."""
    return status == RunStatus.SUCCEEDED


@dataclass(frozen=True)
class ApprovalState:
    """The latest approval request of a run and its answer."""

    action_hash: str
    scope: str
    requested_at: datetime
    expires_at: datetime
    status: Literal["requested", "granted", "denied"] = "requested"
    approver: str | None = None
    grant_expires_at: datetime | None = None
    denial_reason: str = ""
    # Who the request asked for (None: a request recorded before gates named it).
    role: str | None = None
    four_eyes: bool | None = None
    # The largest amount the grant covers (None: the action it is bound to by hash).
    up_to: float | None = None
    # The saga version the answer (grant or denial) was recorded at: what a person whose
    # page showed an earlier version is told happened meanwhile.
    answered_version: int | None = None


@dataclass(frozen=True)
class StepRun:
    """The recorded state of one operation (a step's forward or compensation run)."""

    step_id: str
    kind: StepKind
    operation_key: str
    status: RunStatus = RunStatus.PENDING
    attempt: int = 0
    # The operation version the key is derived from: the definition's, raised by one each
    # time an operator retries the operation as a new operation (a new key).
    operation_version: int = 1
    # The request hash this key was first claimed with, and the forward runs as they stood
    # then (whose receipts its templates resolved from; the fold never mutates a runs
    # mapping, so keeping it costs no copy): one key must mean one request, see
    # saga_core.engine.resolved_commands.key_reuse. Those runs keep their own earlier runs, so this
    # field
    # stays out of == and repr (derived from the same log, it never decides equality).
    request_hash: str | None = None
    forward_at_first_claim: Mapping[str, StepRun] | None = field(
        default=None, compare=False, repr=False
    )
    receipt: Receipt | None = None
    via: str | None = None
    error_class: ErrorClass | None = None
    error_message: str = ""
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    scheduled_at: datetime | None = None
    not_before: datetime | None = None
    unknown_at: datetime | None = None
    absent_at: datetime | None = None
    reconciliations: int = 0
    lookup_receipt: Receipt | None = None
    approval: ApprovalState | None = None
    approval_requests: int = 0
    changed_at: datetime | None = None
    # When the current call times out (StepStarted.timeout_at) and which attempt missed it.
    timeout_at: datetime | None = None
    timed_out_attempt: int = 0
    # Since when a receipt waits for its postcondition (None: not verifying), what the last
    # lookup since then saw and when, and whether the horizon passed unobserved.
    verify_since: datetime | None = None
    verify_lookup: Literal["found", "absent", "unknown"] | None = None
    verify_lookup_at: datetime | None = None
    postcondition_missed: bool = False
    # A compensation not done by its deadline (recorded once, DeadlineMissed).
    deadline_missed: bool = False


# Templates for new runs: replace() on these skips StepRun's 22-field frozen __init__.
_PENDING_FORWARD = StepRun("", StepKind.FORWARD, "")
_PENDING_COMPENSATION = StepRun("", StepKind.COMPENSATION, "")


@dataclass(frozen=True)
class Escalation:
    """Why the saga waits for a human, and which operation it is about."""

    reason: str
    step_id: str | None
    kind: StepKind | None
    at: datetime


@dataclass(frozen=True)
class SagaState:
    """Everything decide needs, folded from the log: runs, phase, budgets, flags, version."""

    definition: SagaDefinition
    saga_id: str = ""
    tenant: str = ""
    started_by: str = ""  # SagaStarted.actor: the principal four-eyes gates exclude
    input: Mapping[str, Any] = field(default_factory=dict)
    input_hash: str = ""
    started: bool = False
    # The way the saga went: forward, or compensating since CompensationStarted (kept once
    # it finished, as the way it ended; screens show ``live_phase``).
    phase: Literal["forward", "compensating"] = "forward"
    escalation: Escalation | None = None
    finished: SagaStatus | None = None
    cancel_requested: bool = False
    retry_budget_left: int = 0
    repaired: bool = False
    compensation_reason: str | None = None
    failed_step: str | None = None
    compensation_started_at: datetime | None = None  # compensation deadlines count from here
    forward: Mapping[str, StepRun] = field(default_factory=dict)
    compensation: Mapping[str, StepRun] = field(default_factory=dict)
    # Start time, cost spent, a limit's breach (saga_core.definitions.budgets; the rules:
    # saga_core.engine.stops).
    budget: BudgetLedger = NO_LEDGER
    version: int = 0
    # Agent plans only (saga_core.agents.replans): how many revisions applied, and the steps a
    # revision dropped after they ran (compensated while the rest goes forward).
    plan_revision: int = 0
    retired: frozenset[str] = frozenset()
    # The pivot whose declared correction an operator chose to run (saga_core.engine.corrections):
    # from then on only that correction runs, and the saga ends with it.
    correcting: str | None = None

    @classmethod
    def initial(cls, definition: SagaDefinition) -> SagaState:
        """The state before any event: nothing started."""
        return cls(definition=definition)

    @property
    def status(self) -> SagaStatus:
        """The saga's status (terminal, paused for a human, compensating or running)."""
        if self.finished is not None:
            return self.finished
        if self.escalation is not None:
            return SagaStatus.MANUAL_INTERVENTION
        if self.phase == "compensating":
            return SagaStatus.COMPENSATING
        return SagaStatus.RUNNING

    @property
    def live_phase(self) -> Literal["forward", "compensating"] | None:
        """The phase the saga runs in now; None once it finished (no phase is live then)."""
        return None if self.finished is not None else self.phase

    @property
    def pivot_passed(self) -> bool:
        """Whether the pivot step is done: from here on only forward, retry or escalate."""
        pivot = self.definition.pivot
        return pivot is not None and self.forward[pivot.id].status in FORWARD_DONE

    def run(self, step_id: str, kind: StepKind) -> StepRun:
        """The run of a step's forward or compensation operation."""
        runs = self.forward if kind is StepKind.FORWARD else self.compensation
        if step_id not in runs:
            raise EventRejected(f"saga {self.saga_id}: no {kind} operation for step {step_id!r}")
        return runs[step_id]

    def receipts(self) -> dict[str, Receipt]:
        """Forward receipts by step id (what templates may reference)."""
        return {sid: r.receipt for sid, r in self.forward.items() if r.receipt is not None}

    def with_run(self, run: StepRun) -> SagaState:
        """A copy with one run replaced."""
        if run.kind is StepKind.FORWARD:
            return replace(self, forward={**self.forward, run.step_id: run})
        return replace(self, compensation={**self.compensation, run.step_id: run})


def _start(state: SagaState, event: SagaStarted) -> SagaState:
    if state.started:
        raise EventRejected(f"saga {state.saga_id} already started")
    definition = state.definition
    if event.definition_hash != definition.content_hash():
        raise DefinitionMismatchError(
            f"saga {event.saga_id} runs definition {event.definition_name} v"
            f"{event.definition_version} hash {event.definition_hash}, "
            f"not {definition.name} v{definition.version} hash {definition.content_hash()}"
        )
    forward, compensation = _fresh_runs(event.saga_id, definition)
    return replace(
        state,
        saga_id=event.saga_id,
        tenant=event.tenant,
        started_by=event.actor,
        input=dict(event.input),
        input_hash=event.input_hash,
        started=True,
        retry_budget_left=event.retry_budget,
        budget=BudgetLedger(started_at=event.at),
        forward=forward,
        compensation=compensation,
    )


class _FreshRun(NamedTuple):
    """One operation of a definition as a saga's start makes its run: all but the key."""

    step_id: str
    kind: StepKind
    fields: dict[str, Any]  # the pending run's fields, its operation key left to fill in
    key_after_saga: str | None  # keys.key_text_after_saga (None: keys.operation_key)


#: Each definition's operations, by content hash.
_FRESH_RUNS: Derived[str, tuple[_FreshRun, ...]] = Derived(256)


def _fresh_runs(
    saga_id: str, definition: SagaDefinition
) -> tuple[dict[str, StepRun], dict[str, StepRun]]:
    """:func:`_pending_runs` of every step, as a start folds them: what is the same for
    every saga of the definition is kept by its content hash, so each start only hashes its
    keys (a sweeper folds every overdue saga from its start; tests/unit/saga_core/engine/
    test_core_state_and_claims.py holds the two equal)."""
    operations = _FRESH_RUNS.get(definition.content_hash(),
                                 lambda: _fresh_operations(definition))
    forward: dict[str, StepRun] = {}
    compensation: dict[str, StepRun] = {}
    head = saga_key_head(saga_id)
    for operation in operations:
        run = object.__new__(StepRun)  # as replace() builds it, fields given whole
        attributes = run.__dict__
        attributes.update(operation.fields)
        attributes["operation_key"] = (
            operation_key(saga_id, operation.step_id, operation.kind,
                          operation.fields["operation_version"])
            if operation.key_after_saga is None
            else key_after_head(head, operation.key_after_saga))
        (forward if operation.kind is StepKind.FORWARD else compensation)[
            operation.step_id] = run
    return forward, compensation


def _fresh_operations(definition: SagaDefinition) -> tuple[_FreshRun, ...]:
    """Each operation of ``definition`` as a start folds it, its key left to the saga."""
    pending = _pending_runs("", definition, [step.id for step in definition.steps])
    return tuple(_fresh_run(run) for runs in pending for run in runs.values())


def _fresh_run(run: StepRun) -> _FreshRun:
    return _FreshRun(run.step_id, run.kind, dict(run.__dict__),
                     key_text_after_saga(run.step_id, run.kind, run.operation_version))


def _pending_runs(
    saga_id: str, definition: SagaDefinition, step_ids: Iterable[str]
) -> tuple[dict[str, StepRun], dict[str, StepRun]]:
    """Fresh forward and compensation runs of ``step_ids``, keyed as the definition says
    (the reference path of :func:`_fresh_runs`; a plan revision's new steps)."""
    forward, compensation = {}, {}
    for step_id in step_ids:
        step = definition.step(step_id)
        key = operation_key(saga_id, step.id, StepKind.FORWARD, step.operation_version)
        forward[step.id] = replace(
            _PENDING_FORWARD,
            step_id=step.id,
            operation_key=key,
            operation_version=step.operation_version,
        )
        if step.compensation is not None:
            c_version = step.compensation.operation_version
            c_key = operation_key(saga_id, step.id, StepKind.COMPENSATION, c_version)
            compensation[step.id] = replace(
                _PENDING_COMPENSATION,
                step_id=step.id,
                operation_key=c_key,
                operation_version=c_version,
            )
    return forward, compensation


def _revise(state: SagaState, event: PlanRevised) -> SagaState:
    """The saga's next plan version: kept runs stay as they are (same key), new steps get
    pending runs, removed ones go, dropped ones stay (retired) for their compensation."""
    if state.phase != "forward" or state.escalation is not None:
        raise EventRejected(f"saga {state.saga_id}: a plan revision needs a running saga")
    definition = SagaDefinition.model_validate(event.definition)
    if definition.content_hash() != event.definition_hash:
        raise DefinitionMismatchError(
            f"saga {state.saga_id}: revision {event.revision} definition hash "
            f"{definition.content_hash()} is not the recorded {event.definition_hash}"
        )
    gone = set(event.removed)
    forward = {k: v for k, v in state.forward.items() if k not in gone}
    compensation = {k: v for k, v in state.compensation.items() if k not in gone}
    new_forward, new_compensation = _pending_runs(state.saga_id, definition, event.added)
    return replace(
        state,
        definition=definition,
        forward={**forward, **new_forward},
        compensation={**compensation, **new_compensation},
        plan_revision=event.revision,
        retired=(state.retired - set(event.kept) - gone) | set(event.dropped),
    )


def _step(state: SagaState, event: StepEvent) -> SagaState:
    run = state.run(event.step_id, event.kind)
    at = event.at
    new: StepRun
    match event:
        case StepScheduled():
            new = replace(
                run,
                changed_at=at,
                status=RunStatus.SCHEDULED,
                attempt=event.attempt,
                scheduled_at=at,
                not_before=event.not_before,
                lease_expires_at=None,
                worker_id=None,
            )
            if event.spends_retry_budget:
                state = replace(state, retry_budget_left=max(0, state.retry_budget_left - 1))
        case StepStarted() if run.request_hash is None:
            # The key's first claim: what it was claimed with, and what that resolved from.
            new = replace(
                run,
                changed_at=at,
                status=RunStatus.STARTED,
                attempt=event.attempt,
                request_hash=event.request_hash,
                forward_at_first_claim=state.forward,
                worker_id=event.worker_id,
                lease_expires_at=event.lease_expires_at,
                timeout_at=event.timeout_at,
            )
        case StepStarted():
            new = replace(
                run,
                changed_at=at,
                status=RunStatus.STARTED,
                attempt=event.attempt,
                worker_id=event.worker_id,
                lease_expires_at=event.lease_expires_at,
                timeout_at=event.timeout_at,
            )
        case StepSucceeded() if _has_postcondition(state, event):
            # A receipt is a fact, but it advances nothing until the postcondition is seen.
            new = replace(
                run,
                status=RunStatus.VERIFYING,
                receipt=event.receipt,
                via=event.via,
                changed_at=at,
                verify_since=at,
                verify_lookup=None,
                verify_lookup_at=None,
                reconciliations=0,
                postcondition_missed=False,
            )
        case StepSucceeded():
            # A receipt is a fact: even a late worker's success is recorded.
            new = replace(
                run,
                status=RunStatus.SUCCEEDED,
                receipt=event.receipt,
                via=event.via,
                changed_at=at,
            )
        case StepFailed() if event.error_class is ErrorClass.AMBIGUOUS:
            new = replace(
                run, status=RunStatus.UNKNOWN, unknown_at=at, error_class=None, changed_at=at
            )
        case StepFailed():
            new = replace(
                run,
                changed_at=at,
                status=RunStatus.FAILED,
                error_class=event.error_class,
                error_message=event.message,
            )
        case StepOutcomeUnknown():
            new = replace(
                run, status=RunStatus.UNKNOWN, unknown_at=at, reconciliations=0, changed_at=at
            )
        case ReconciliationScheduled():
            new = replace(
                run,
                changed_at=at,
                status=RunStatus.RECONCILING,
                not_before=event.not_before,
                scheduled_at=at,
                reconciliations=run.reconciliations + 1,
            )
        case ReconciliationResult() if run.verify_since is not None:
            # A lookup for the postcondition: what it saw is evidence, not a new outcome.
            new = replace(
                run,
                changed_at=at,
                status=RunStatus.VERIFYING,
                lookup_receipt=event.receipt,
                verify_lookup=event.result,
                verify_lookup_at=at,
            )
        case PostconditionObserved():
            new = replace(run, changed_at=at, status=RunStatus.SUCCEEDED, receipt=event.receipt)
        case PostconditionNotObserved():
            new = replace(run, changed_at=at, postcondition_missed=True)
        case DeadlineMissed() if event.deadline_kind == "step_timeout":
            new = replace(run, changed_at=at, timed_out_attempt=event.attempt)
            if run.status is RunStatus.STARTED and run.attempt == event.attempt:
                # Dispatched and unanswered: the call may have taken effect (rule 3).
                new = replace(new, status=RunStatus.UNKNOWN, unknown_at=at, reconciliations=0)
        case DeadlineMissed():
            new = replace(run, changed_at=at, deadline_missed=True)
        case ReconciliationResult():
            status = {
                "found": RunStatus.FOUND,
                "absent": RunStatus.ABSENT,
                "unknown": RunStatus.UNKNOWN,
            }[event.result]
            new = replace(
                run,
                changed_at=at,
                status=status,
                lookup_receipt=event.receipt,
                absent_at=at if event.result == "absent" else run.absent_at,
            )
        case ApprovalRequested():
            approval = ApprovalState(event.action_hash, event.scope, at, event.expires_at,
                                     role=event.role, four_eyes=event.four_eyes)
            new = replace(
                run,
                changed_at=at,
                status=RunStatus.AWAITING_APPROVAL,
                approval=approval,
                approval_requests=run.approval_requests + 1,
            )
        case ApprovalGranted() | ApprovalDenied():
            new = replace(_answer(run, event, state.version + 1), changed_at=at)
        case _:
            raise EventRejected(f"unhandled step event {event.event_type}")
    if isinstance(event, StepStarted):
        # Every started call is charged, forward or compensation (saga_core.definitions.budgets).
        cost = state.definition.call_cost(event.step_id, event.kind)
        if cost:
            state = replace(state, budget=charged(state.budget, cost))
    # One replace of the run (each branch sets changed_at) and one of the state.
    runs = "forward" if new.kind is StepKind.FORWARD else "compensation"
    return replace(
        state, **{runs: {**getattr(state, runs), new.step_id: new}}, version=state.version + 1
    )


def _has_postcondition(state: SagaState, event: StepSucceeded) -> bool:
    """Whether the operation's tool declares a postcondition its receipt must wait for."""
    definition = state.definition
    if not definition.declares_conditions:
        return False
    spec = definition.tool_spec(event.step_id, event.kind)
    return spec is not None and spec.postcondition is not None


def _answer(run: StepRun, event: ApprovalGranted | ApprovalDenied, version: int) -> StepRun:
    """The run with a person's answer (recorded at ``version``) to its open request."""
    approval = run.approval
    if approval is None or approval.action_hash != event.action_hash:
        # check_approval keeps such answers out of the log; if one arrives anyway it cannot
        # approve a different action, so it is recorded as nothing.
        return run
    if isinstance(event, ApprovalGranted):
        answered = replace(
            approval, status="granted", approver=event.approver,
            grant_expires_at=event.expires_at, up_to=event.up_to, answered_version=version,
        )
        return replace(run, approval=answered)
    answered = replace(
        approval, status="denied", approver=event.approver, denial_reason=event.reason,
        answered_version=version,
    )
    # A denied request waits for nobody: the run says so (a run not waiting on its request,
    # which check_denial refuses, keeps its status).
    status = RunStatus.DENIED if run.status is RunStatus.AWAITING_APPROVAL else run.status
    return replace(run, approval=answered, status=status)


#: A run in one of these waits for a worker or a person to act on it.
WAITING = frozenset({RunStatus.AWAITING_APPROVAL, RunStatus.SCHEDULED, RunStatus.RETRY_REQUESTED})


def _withdrawn(runs: Mapping[str, StepRun], at: datetime) -> Mapping[str, StepRun]:
    """``runs`` with every waiting run withdrawn (the same mapping when none waits)."""
    if not any(run.status in WAITING for run in runs.values()):
        return runs
    return {step_id: replace(run, status=RunStatus.WITHDRAWN, changed_at=at)
            if run.status in WAITING else run for step_id, run in runs.items()}


def _operator(state: SagaState, event: OperatorAction) -> SagaState:
    state = replace(state, escalation=None, repaired=True)
    if event.action == "resume":
        # Resume gives the saga fresh bounds; the cause may still be there, and decide will
        # escalate again if so. A saga stopped at a limit goes on over it: the person lifts it.
        state = replace(state, retry_budget_left=state.definition.retry_budget)
        if state.budget.breach is not None and state.phase == "forward":
            state = replace(state, budget=lifted(state.budget))
        if event.step_id is not None:
            run = state.run(event.step_id, event.kind)
            run = replace(run, reconciliations=0, approval_requests=0)
            if run.status is RunStatus.VERIFYING:
                # A fresh horizon to observe the postcondition in.
                run = replace(run, verify_since=event.at, verify_lookup=None,
                              verify_lookup_at=None, postcondition_missed=False)
            state = state.with_run(run)
        return state
    if event.step_id is None:
        raise EventRejected(f"operator action {event.action} needs a step_id")
    if event.action == "run_correction":
        pivot = state.definition.pivot
        if pivot is None or pivot.id != event.step_id or event.step_id not in state.compensation:
            raise EventRejected(f"run_correction names {event.step_id!r}, not a pivot with a "
                                "declared correction")
        return replace(state, correcting=event.step_id)
    kind = StepKind.COMPENSATION if event.action == "mark_compensated" else event.kind
    run = state.run(event.step_id, kind)
    if event.action == "retry_step":
        run = replace(run, status=RunStatus.RETRY_REQUESTED, reconciliations=0, approval_requests=0)
    elif event.action == "retry_as_new_operation":
        run = _as_new_operation(state, run)
    elif event.action == "skip":
        run = replace(run, status=RunStatus.SKIPPED)
    else:  # force_complete, mark_compensated
        receipt = event.receipt or run.receipt or run.lookup_receipt
        run = replace(run, status=RunStatus.FORCED, receipt=receipt)
    return state.with_run(replace(run, changed_at=event.at))


def _as_new_operation(state: SagaState, run: StepRun) -> StepRun:
    """The run retried under the next operation version: a new key with nothing recorded
    under it yet (its first claim records its request) and no lookups of the old key. It is
    pending like any operation never claimed, so decide treats it as one: its request is
    resolved anew and its approval policy, if any, asks again for it."""
    version = run.operation_version + 1
    return replace(
        run,
        status=RunStatus.PENDING,
        operation_version=version,
        operation_key=operation_key(state.saga_id, run.step_id, run.kind, version),
        request_hash=None,
        forward_at_first_claim=None,
        reconciliations=0,
        approval_requests=0,
        lookup_receipt=None,
        unknown_at=None,
        absent_at=None,
        verify_since=None,
        verify_lookup=None,
        verify_lookup_at=None,
        postcondition_missed=False,
    )


def _saga(state: SagaState, event: SagaEvent) -> SagaState:
    match event:
        case CompensationStarted():
            # No forward operation is claimed from here on (saga_core.engine.claims): those that
            # waited for a worker or a person wait no more.
            return replace(
                state,
                phase="compensating",
                compensation_reason=event.reason,
                failed_step=event.failed_step,
                compensation_started_at=event.at,
                forward=_withdrawn(state.forward, event.at),
            )
        case CancelRequested():
            # Before the pivot a cancel also ends a pause: compensation is the way out.
            clear = state.escalation is not None and not state.pivot_passed
            return replace(
                state, cancel_requested=True, escalation=None if clear else state.escalation
            )
        case ManualInterventionRequired():
            return replace(
                state, escalation=Escalation(event.reason, event.step_id, event.kind, event.at)
            )
        case OperatorAction():
            return _operator(state, event)
        case SagaFinished():
            return replace(state, finished=event.state,
                           forward=_withdrawn(state.forward, event.at),
                           compensation=_withdrawn(state.compensation, event.at))
        case BudgetExceeded():
            return replace(state, budget=with_breach(state.budget, event))
        case PlanRevised():
            return _revise(state, event)
    raise EventRejected(f"unknown saga event {type(event).__name__}")


FOLD_VERSION = 2
"""The meaning of :func:`evolve`. Bump it whenever a change makes evolve fold some history
into a different state (a new rule, a fixed bug), even with every dataclass unchanged:
saved snapshots (saga_core.engine.state_codec) carry it in their schema fingerprint, so the ones the
old meaning wrote are ignored and written again, never folded on from."""


def evolve(state: SagaState, event: SagaEvent) -> SagaState:
    """Fold one event into the state, returning a new state (the input is never mutated)."""
    if isinstance(event, SagaStarted):
        new = _start(state, event)
    elif not state.started:
        raise EventRejected(f"{event.event_type} before SagaStarted")
    elif state.finished is not None:
        raise EventRejected(f"{event.event_type} after the saga finished ({state.finished})")
    elif isinstance(event, StepEvent):
        return _step(state, event)  # bumps the version itself (one replace fewer)
    else:
        new = _saga(state, event)
    return replace(new, version=state.version + 1)


def fold(definition: SagaDefinition, events: Iterable[SagaEvent]) -> SagaState:
    """The saga's current state: every event folded, in log order, into the initial state."""
    state = SagaState.initial(definition)
    for event in events:
        state = evolve(state, event)
    return state
