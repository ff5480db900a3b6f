"""The orchestrator's judgement: ``decide(state, now)`` returns what must happen next.

Pure and deterministic (steps are visited in declaration order), and idempotent: it only
returns what the log does not already record, so after a decision's event is folded in the
same decision is never returned again. Callers append each decision's event with the stream's
expected version and call decide again until it returns nothing.

Each batch has one shape: facts first (a lease expired, a lookup found the effect, a declared
time passed or a postcondition was observed or given up on, see
:mod:`saga_core.engine.condition_rules`;
one of those that escalates comes with its escalation, alone); otherwise
a limit's breach (``StopAtLimit``, see :mod:`saga_core.engine.stops`: a time limit passed, or the
forward calls about to be scheduled would break the cost budget); otherwise at most one
escalation, or one BeginCompensation, or one Finish; otherwise the schedules, retries,
reconciliations and approval requests that are due. No decision leads to an attempt
that would reuse an operation key with another request
(``saga_core.engine.resolved_commands.key_reuse``):
that attempt escalates instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from saga_core.approval.policy import (
    RENEWAL_SCOPE,
    GatePolicy,
    effective_policy,
    grant_problem,
    renewal_policy,
)
from saga_core.approval.totals import TENANT_WINDOW_SCOPE
from saga_core.contracts import ErrorClass, SagaStatus, Semantics, StepKind
from saga_core.definitions.definition import StepDefinition
from saga_core.engine.backoff import backoff_delay
from saga_core.engine.condition_rules import (
    condition_facts,
    timed_out,
    timeout_rejection,
    verify_next,
)
from saga_core.engine.corrections import correction_summary
from saga_core.engine.decision_types import (
    AcceptReconciledReceipt,
    BeginCompensation,
    Decision,
    DeclareOutcomeUnknown,
    Escalate,
    Finish,
    Reconcile,
    RequestApproval,
    RetryAfterBackoff,
    ScheduleCompensation,
    ScheduleStep,
)
from saga_core.engine.escalations import escalate, evidence_for
from saga_core.engine.resolved_commands import (
    KeyReuse,
    operation_action_hash,
    pending_key_reuse,
    redacted_arguments,
    resolve_arguments,
)
from saga_core.engine.state import FORWARD_DONE, IN_DOUBT, RunStatus, SagaState, StepRun
from saga_core.engine.stops import (
    cost_overrun,
    limit_evidence,
    limit_passed,
    must_escalate,
    stopped_by,
)
from saga_core.errors import TemplateError

FORWARD, COMPENSATION = StepKind.FORWARD, StepKind.COMPENSATION
COMPENSATION_DONE = frozenset({RunStatus.SUCCEEDED, RunStatus.FORCED, RunStatus.SKIPPED})


@dataclass
class _Outcome:
    """What one run asks for: decisions, an escalation, or a definite business failure."""

    decisions: list[Decision] = field(default_factory=list)
    escalation: Escalate | None = None
    rejection: str | None = None


def decide(state: SagaState, now: datetime) -> list[Decision]:
    """What must happen next for this saga at ``now`` and is not yet recorded."""
    if now.tzinfo is None:
        raise ValueError("decide needs an aware `now`")
    if not state.started or state.finished is not None or state.escalation is not None:
        return []  # finished, or paused until an operator acts
    facts = _facts(state, now)
    if facts:
        return facts
    if state.correcting is not None:
        return _correction_phase(state, now)
    if state.phase == "forward":
        return _forward_phase(state, now)
    return _compensation_phase(state, now)


# -- facts ---------------------------------------------------------------------------------


def _facts(state: SagaState, now: datetime) -> list[Decision]:
    conditions = condition_facts(state, now)
    if any(isinstance(d, Escalate) for d in conditions):
        return conditions  # the fact and its escalation, recorded alone
    found: list[Decision] = []
    for run in [*state.forward.values(), *state.compensation.values()]:
        expired = run.lease_expires_at is not None and now >= run.lease_expires_at
        if run.status is RunStatus.STARTED and expired and not timed_out(run, now):
            detail = f"lease of worker {run.worker_id} expired at {run.lease_expires_at}"
            found.append(
                DeclareOutcomeUnknown(run.step_id, run.kind, run.attempt, run.operation_key, detail)
            )
        elif run.status is RunStatus.FOUND and run.lookup_receipt is not None:
            found.append(
                AcceptReconciledReceipt(
                    run.step_id, run.kind, run.attempt, run.operation_key, run.lookup_receipt
                )
            )
    return found + conditions


# -- forward phase -------------------------------------------------------------------------


def _forward_phase(state: SagaState, now: datetime) -> list[Decision]:
    definition = state.definition
    cancel = state.cancel_requested and not state.pivot_passed
    # A limit stops forward work (saga_core.engine.stops): first record the breach, then compensate
    # like a cancel, or hand the saga to a person; a cancel before the pivot still wins.
    breach = stopped_by(state)
    if not cancel:
        passed = limit_passed(state, now)
        if passed is not None:
            return [passed]
        if breach is not None and must_escalate(state):
            evidence = limit_evidence(state, breach, now)
            return [Escalate(evidence.reason, None, None, evidence)]
    stop_forward = cancel or breach is not None
    decisions: list[Decision] = []
    escalations: list[Escalate] = []
    rejection: tuple[str, str | None] | None = None
    per_step: dict[str, list[Decision]] = {}
    retired_done = _retired_settled(state)
    for step in definition.steps:
        run = state.forward[step.id]
        if step.id in state.retired:
            outcome = _retired(state, step, retired_done, now)
        elif run.status is RunStatus.PENDING:
            deps_done = all(state.forward[d].status in FORWARD_DONE for d in step.depends_on)
            outcome = _ready(state, step, run, now) if deps_done and not stop_forward else None
        else:
            outcome = _advance(state, step, run, now)
        if outcome is None:
            continue
        per_step[step.id] = outcome.decisions
        decisions += outcome.decisions
        if outcome.escalation is not None:
            escalations.append(outcome.escalation)
        if outcome.rejection is not None and rejection is None:
            rejection = (outcome.rejection, step.id)
        timed_out_reason = timeout_rejection(state, step, run)
        if timed_out_reason is not None and rejection is None:
            rejection = (timed_out_reason, step.id)
    if escalations:
        return [escalations[0]]
    if rejection is None and stop_forward:
        why = breach.reason if breach is not None and not cancel else None
        rejection = (why or "cancel requested by an operator", None)
    if rejection is not None:
        pivot = definition.pivot
        pivot_run = state.forward[pivot.id] if pivot is not None else None
        if pivot is not None and pivot_run is not None and pivot_run.status in IN_DOUBT:
            # Whether the point of no return was passed must be known before undoing anything:
            # wait for the worker or the lookup, else ask a human to establish it.
            pending = per_step.get(pivot.id, [])
            if pending or pivot_run.status in (RunStatus.STARTED, RunStatus.RECONCILING):
                return pending
            reason = f"{rejection[0]}; the pivot's outcome is unproven, so nothing can be undone"
            return [escalate(state, pivot, pivot_run, reason, now)]
        return [BeginCompensation(rejection[0], rejection[1])]
    if decisions:
        overrun = cost_overrun(state, decisions)
        return [overrun] if overrun is not None else decisions
    active = [run for sid, run in state.forward.items() if sid not in state.retired]
    if all(run.status in FORWARD_DONE for run in active) and all(retired_done.values()):
        return [_finish_forward(state)]
    return []


def _finish_forward(state: SagaState) -> Finish:
    active = [r for r in state.forward.values() if r.step_id not in state.retired]
    repaired = [r.step_id for r in active if r.status is not RunStatus.SUCCEEDED]
    dropped = sorted(state.retired)
    replan = f"; dropped by a replan and compensated: {', '.join(dropped)}" if dropped else ""
    if state.repaired or repaired:
        note = f"; operator-repaired: {', '.join(repaired)}" if repaired else ""
        return Finish(
            SagaStatus.COMMITTED_WITH_REPAIR, f"committed with operator repair{note}{replan}"
        )
    cancel = "; cancel arrived after the pivot" if state.cancel_requested else ""
    return Finish(SagaStatus.COMPLETED, f"all {len(active)} steps succeeded{cancel}{replan}")


def _retired_settled(state: SagaState) -> dict[str, bool]:
    """For each step a plan revision dropped: whether nothing of it is left to undo."""
    settled = {}
    for step_id in state.retired:
        step = state.definition.step(step_id)
        effect = _forward_effect(state, step, state.forward[step_id])
        comp = state.compensation.get(step_id)
        # No compensation: nothing to undo (a revision never drops an effect it cannot undo).
        settled[step_id] = effect == "none" or comp is None or comp.status in COMPENSATION_DONE
    return settled


def _retired(
    state: SagaState, step: StepDefinition, settled: dict[str, bool], now: datetime
) -> _Outcome | None:
    """A dropped step's compensation, run while the saga goes forward, after the dropped
    steps that depend on it are undone (reverse dependency order, as in compensation)."""
    comp = state.compensation.get(step.id)
    if comp is None or settled[step.id]:
        return None
    if comp.status is not RunStatus.PENDING:
        return _advance(state, step, comp, now)
    later = state.definition.descendants(step.id) & state.retired
    if all(settled[d] for d in later):
        return _ready(state, step, comp, now)
    return None


# -- correction (saga_core.engine.corrections)
# ------------------------------------------------------


def _correction_phase(state: SagaState, now: datetime) -> list[Decision]:
    """Only the pivot's correction runs; its end is the saga's: COMMITTED_WITH_REPAIR when
    done, a pause for a person (with the reason) when it fails for good."""
    pivot = state.definition.step(state.correcting or "")
    run = state.compensation[pivot.id]
    if run.status in COMPENSATION_DONE:
        return [Finish(SagaStatus.COMMITTED_WITH_REPAIR, correction_summary(state))]
    outcome = _ready(state, pivot, run, now) if run.status is RunStatus.PENDING else _advance(
        state, pivot, run, now)
    if outcome.escalation is not None:
        escalation = outcome.escalation
        reason = f"the correction of {pivot.id} failed: {escalation.reason}"
        return [replace(escalation, reason=reason,
                        evidence=escalation.evidence.model_copy(update={"reason": reason}))]
    return outcome.decisions


# -- compensation phase --------------------------------------------------------------------


def _forward_effect(state: SagaState, step: StepDefinition, run: StepRun) -> str:
    """'effect', 'none' or 'doubt' for a forward run, as compensation must see it."""
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FORCED):
        return "effect"
    if run.status is RunStatus.ABSENT:
        return "none" if _past_horizon(state, step, run) else "doubt"
    if run.status in IN_DOUBT:
        return "doubt"
    # Never dispatched, definitely failed, skipped, or stranded: claims stop once compensating.
    return "none"


def _past_horizon(state: SagaState, step: StepDefinition, run: StepRun) -> bool:
    end = _horizon_end(state, step, run)
    return end is not None and run.absent_at is not None and run.absent_at >= end


def _horizon_end(state: SagaState, step: StepDefinition, run: StepRun) -> datetime | None:
    spec = state.definition.tool_spec(step.id, run.kind)
    if spec is None or spec.commit_horizon_s is None or run.unknown_at is None:
        return None
    return run.unknown_at + timedelta(seconds=spec.commit_horizon_s)


def _compensation_phase(state: SagaState, now: datetime) -> list[Decision]:
    definition = state.definition
    if state.pivot_passed:
        return [escalate(state, None, None, "the pivot succeeded while compensating", now)]
    effects = {s.id: _forward_effect(state, s, state.forward[s.id]) for s in definition.steps}
    settled: dict[str, bool] = {}
    for step in definition.steps:
        comp = state.compensation.get(step.id)
        if effects[step.id] == "doubt":
            settled[step.id] = False
        elif effects[step.id] == "none" or comp is None:
            settled[step.id] = True
        else:
            settled[step.id] = comp.status in COMPENSATION_DONE
    decisions: list[Decision] = []
    escalations: list[Escalate] = []
    for step in definition.steps:
        outcome: _Outcome | None = None
        comp = state.compensation.get(step.id)
        if effects[step.id] == "doubt":
            outcome = _advance(state, step, state.forward[step.id], now)
        elif effects[step.id] == "effect" and comp is not None and not settled[step.id]:
            if comp.status is not RunStatus.PENDING:
                outcome = _advance(state, step, comp, now)
            elif all(settled[d] for d in definition.descendants(step.id)):
                outcome = _ready(state, step, comp, now)
        if outcome is not None:
            decisions += outcome.decisions
            if outcome.escalation is not None:
                escalations.append(outcome.escalation)
    if escalations:
        return [escalations[0]]
    if decisions or not all(settled.values()):
        return decisions
    return [_finish_compensation(state, effects)]


def _finish_compensation(state: SagaState, effects: dict[str, str]) -> Finish:
    undone, residual = [], []
    for step in state.definition.steps:
        if effects[step.id] != "effect":
            continue
        comp = state.compensation.get(step.id)
        compensated = comp is not None and comp.status in (RunStatus.SUCCEEDED, RunStatus.FORCED)
        if compensated and step.semantics is not Semantics.IRREVERSIBLE:
            undone.append(step.id)
        elif step.leaves_effect:
            how = "corrected" if compensated else "not undone"
            residual.append(f"{step.id} ({step.semantics}, {how})")
    summary = f"compensated: {', '.join(undone) or 'nothing'}"
    if residual:
        return Finish(
            SagaStatus.PARTIALLY_COMPENSATED, f"{summary}; residual: {', '.join(residual)}"
        )
    return Finish(SagaStatus.COMPENSATED, f"{summary} ({state.compensation_reason})")


# -- one run -------------------------------------------------------------------------------


def _schedule(run: StepRun, now: datetime, reason: str) -> Decision:
    if run.kind is FORWARD:
        return ScheduleStep(run.step_id, run.attempt + 1, now, reason)
    return ScheduleCompensation(run.step_id, run.attempt + 1, now, reason)


def _ready(state: SagaState, step: StepDefinition, run: StepRun, now: datetime) -> _Outcome:
    """A run that may start now: ask for approval if its gate applies, else schedule it."""
    policy = effective_policy(state.definition, step.id, run.kind)
    try:
        args = resolve_arguments(state, step.id, run.kind)
    except TemplateError as exc:
        return _Outcome(escalation=escalate(state, step, run, f"cannot resolve: {exc}", now))
    if policy is not None and policy.judge(state, step.id, run.kind, args):
        return _approval(state, step, run, policy, now)
    reason = "dependencies done" if run.kind is FORWARD else "dependents compensated"
    return _Outcome([_schedule(run, now, reason)])


def _approval(
    state: SagaState,
    step: StepDefinition,
    run: StepRun,
    policy: GatePolicy,
    now: datetime,
    *,
    why: str = "approval policy applies",
    window: dict[str, Any] | None = None,
) -> _Outcome:
    approval = run.approval
    current = operation_action_hash(state, step.id, run.kind)
    valid_grant = (
        approval is not None
        and approval.action_hash == current
        and approval.status == "granted"
        and approval.grant_expires_at is not None
        and now < approval.grant_expires_at
    )
    if valid_grant and run.status is RunStatus.AWAITING_APPROVAL:
        return _Outcome([_schedule(run, now, "approved")])
    if approval is not None and run.status in _ANSWERED_OR_OPEN:
        if approval.action_hash == current and approval.status == "denied":
            denied = f"approval denied by {approval.approver}"
            if run.kind is FORWARD and not state.pivot_passed:
                return _Outcome(rejection=denied)
            # Past the pivot, or a compensation: nothing else may run it; a person decides.
            return _Outcome(escalation=escalate(state, step, run, denied, now))
        if approval.action_hash != current:
            why = "the action changed since approval was requested"
        elif approval.status == "requested" and now < approval.expires_at:
            return _Outcome()  # waiting for a human
        else:
            why = "approval expired"
    if run.approval_requests >= state.definition.max_approval_requests:
        reason = f"{why}; no usable approval after {run.approval_requests} requests"
        return _Outcome(escalation=escalate(state, step, run, reason, now))
    expires = now + timedelta(seconds=policy.request_ttl_s)
    gate = _gateevidence_for(state, step, run, policy)
    if window is not None:  # asked by a claim that would pass the tenant window
        gate = {**gate, "tenant_window": window}
    evidence = evidence_for(
        state, step, run, why, now, alternatives=["approve", "deny"], deadline=expires,
        details={"gate": gate},
    )
    risk = str(policy.risk_class) if policy.risk_class is not None else None
    scope = TENANT_WINDOW_SCOPE if window is not None else policy.scope
    return _Outcome([RequestApproval(step.id, run.kind, current, scope, evidence,
                                     expires, policy.role, risk, policy.four_eyes)])


def ask_over_window(state: SagaState, step_id: str, kind: StepKind, window: dict[str, Any],
                    now: datetime) -> Decision:
    """What a worker records in place of a claim that would pass its tenant window
    (``window``: the window's evidence, :class:`saga_core.approval.totals.WindowTotal`): an approval
    request under :data:`~saga_core.approval.totals.TENANT_WINDOW_SCOPE`, or the escalation when no
    more requests are allowed."""
    step = state.definition.step(step_id)
    run = state.run(step_id, kind)
    policy = effective_policy(state.definition, step_id, kind) or GatePolicy(f"{step_id}:{kind}")
    why = (f"the tenant window of {window.get('window')} would hold "
           f"{window.get('with_this_call')} with this call, above {window.get('limit')}")
    outcome = _approval(state, step, run, policy, now, why=why, window=window)
    return outcome.escalation or outcome.decisions[0]


def _gateevidence_for(
    state: SagaState, step: StepDefinition, run: StepRun, policy: GatePolicy
) -> dict[str, Any]:
    """Who may answer and why a person is asked, amounts shown only when not secret."""
    try:
        args = resolve_arguments(state, step.id, run.kind)
        shown = redacted_arguments(state, step.id, run.kind)
    except TemplateError:
        args = shown = {}
    return policy.evidence(state, step.id, run.kind, args, shown)


#: A run whose approval request is open or was denied: its answer (or its absence) decides.
_ANSWERED_OR_OPEN = frozenset({RunStatus.AWAITING_APPROVAL, RunStatus.DENIED})

#: Decisions that lead to another attempt of the run they are about (an approval asks for one).
_NEXT_ATTEMPT = (ScheduleStep, ScheduleCompensation, RetryAfterBackoff, RequestApproval)


def _advance(state: SagaState, step: StepDefinition, run: StepRun, now: datetime) -> _Outcome:
    """Progress a run that has left PENDING; never towards an attempt that would reuse the
    run's operation key with another request (that escalates instead)."""
    outcome = _progress(state, step, run, now)
    next_attempt = run.status is RunStatus.SCHEDULED or any(
        isinstance(d, _NEXT_ATTEMPT) for d in outcome.decisions
    )
    if next_attempt and not _forward_stopped(state, run):
        reuse = pending_key_reuse(state, step.id, run.kind)
        if reuse is not None:
            return _Outcome(escalation=escalate_key_reuse(state, reuse, now))
    return outcome


def _forward_stopped(state: SagaState, run: StepRun) -> bool:
    """Whether no attempt of this forward run will be claimed any more: the saga compensates,
    a cancel arrived before the pivot (it compensates next), or a limit stopped forward
    work; its key is used no more."""
    cancelled = state.cancel_requested and not state.pivot_passed
    stopping = state.phase == "compensating" or cancelled or stopped_by(state) is not None
    return run.kind is FORWARD and stopping


def escalate_key_reuse(state: SagaState, reuse: KeyReuse, now: datetime) -> Escalate:
    """The escalation for an attempt that would reuse its operation key with another request;
    ``decide`` records it before scheduling such an attempt, a worker in place of its claim."""
    step = state.definition.step(reuse.step_id)
    run = state.run(reuse.step_id, reuse.kind)
    return escalate(state, step, run, reuse.reason, now, details=reuse.evidence())


def _progress(state: SagaState, step: StepDefinition, run: StepRun, now: datetime) -> _Outcome:
    """What a run that has left PENDING asks for next, by its status."""
    status = run.status
    if status in _ANSWERED_OR_OPEN:
        renewing = run.approval is not None and run.approval.scope == RENEWAL_SCOPE
        policy = (renewal_policy(state.definition, step.id, run.kind) if renewing
                  else effective_policy(state.definition, step.id, run.kind)
                  or GatePolicy(f"{step.id}:{run.kind}"))
        return _approval(state, step, run, policy, now)
    if status is RunStatus.SCHEDULED and not _forward_stopped(state, run):
        # The claim re-checks the grant; once it no longer holds (expired, another
        # action, out of scope) the attempt cannot be claimed, so a person is asked again.
        # The policy first: an ungated run (most) needs no grant, and no resolved arguments.
        gated = effective_policy(state.definition, step.id, run.kind)
        if gated is not None and (problem := grant_problem(state, run, now)) is not None:
            return _approval(state, step, run, gated, now, why=problem)
    if status is RunStatus.FAILED:
        return _failure(state, step, run, now)
    if status is RunStatus.UNKNOWN:
        return _reconcile(state, step, run, now, "outcome unknown")
    if status is RunStatus.ABSENT:
        return _absent(state, step, run, now)
    if status is RunStatus.FOUND:  # found without a receipt: nothing to prove the effect with
        return _Outcome(escalation=escalate(state, step, run, "lookup found no receipt", now))
    if status is RunStatus.RETRY_REQUESTED:
        return _Outcome([_schedule(run, now, "operator retry")])
    if status is RunStatus.VERIFYING:
        lookup = verify_next(state, step, run)
        return _Outcome([lookup] if lookup is not None else [])
    return _Outcome()  # scheduled, started within its lease, reconciling, or done


def _failure(state: SagaState, step: StepDefinition, run: StepRun, now: datetime) -> _Outcome:
    error = run.error_class
    before_pivot = run.kind is FORWARD and not state.pivot_passed
    if error is ErrorClass.TRANSIENT:
        return _retry(state, step, run, now, f"transient failure: {run.error_message}")
    if error is ErrorClass.BUSINESS_REJECTION:
        if before_pivot:
            return _Outcome(rejection=f"business rejection: {run.error_message}")
        if run.kind is FORWARD:  # after the pivot: only forward
            return _retry(state, step, run, now, f"business rejection: {run.error_message}")
    if error is ErrorClass.PRECONDITION_FAILED and run.kind is FORWARD and (
            step.precondition or step.on_precondition_failed):
        return _forward_precondition(state, step, run, now)
    if error is ErrorClass.AUTH_EXPIRED:
        # Never reuse old authority: pause for a renewed approval, keeping the same key.
        renew = renewal_policy(state.definition, step.id, run.kind)
        return _approval(state, step, run, renew, now, why="authorization expired")
    reason = {
        ErrorClass.PRECONDITION_FAILED: "target changed since the forward step (precondition)",
        ErrorClass.PERMANENT: "permanent failure",
    }.get(error or ErrorClass.PERMANENT, f"{error} failure")
    return _Outcome(escalation=escalate(state, step, run, f"{reason}: {run.error_message}", now))


def _forward_precondition(
    state: SagaState, step: StepDefinition, run: StepRun, now: datetime
) -> _Outcome:
    """A forward step's declared precondition did not hold: its ``on_precondition_failed``
    follows (default escalate; compensate only before the pivot, validation sees to it)."""
    policy = step.on_precondition_failed or "escalate"
    why = f"precondition of {step.id} failed: {run.error_message}"
    if policy == "retry":
        return _retry(state, step, run, now, why)
    if policy == "compensate" and not state.pivot_passed:
        return _Outcome(rejection=f"{why}; policy: compensate")
    return _Outcome(escalation=escalate(state, step, run, f"{why}; policy: {policy}", now))


def _retry(
    state: SagaState, step: StepDefinition, run: StepRun, now: datetime, why: str
) -> _Outcome:
    policy = state.definition.retry_policy(step.id, run.kind)
    if policy.max_attempts is not None and run.attempt >= policy.max_attempts:
        reason = f"{why}; {run.attempt} attempts exhausted"
        if run.kind is FORWARD and not state.pivot_passed:
            return _Outcome(rejection=reason)
        return _Outcome(escalation=escalate(state, step, run, reason, now))
    if state.retry_budget_left <= 0:
        reason = f"{why}; saga retry budget exhausted"
        return _Outcome(escalation=escalate(state, step, run, reason, now))
    base = run.changed_at or now
    not_before = base + backoff_delay(policy, run.operation_key, run.attempt)
    decision = RetryAfterBackoff(step.id, run.kind, run.attempt + 1, not_before, why)
    return _Outcome([decision])


def _reconcile(
    state: SagaState,
    step: StepDefinition,
    run: StepRun,
    now: datetime,
    why: str,
    *,
    not_before: datetime | None = None,
) -> _Outcome:
    policy = state.definition.retry_policy(step.id, run.kind)
    if run.reconciliations >= policy.max_reconciliations:
        reason = f"{why}: still unproven after {run.reconciliations} lookups by key"
        return _Outcome(escalation=escalate(state, step, run, reason, now))
    if not_before is None:
        base = run.changed_at or now
        delay = backoff_delay(policy, run.operation_key, run.reconciliations)
        not_before = base if run.reconciliations == 0 else base + delay
    return _Outcome([Reconcile(step.id, run.kind, run.attempt, not_before, why)])


def _absent(state: SagaState, step: StepDefinition, run: StepRun, now: datetime) -> _Outcome:
    """Confirmed absent: retry only where a late commit cannot duplicate the effect."""
    spec = state.definition.tool_spec(step.id, run.kind)
    horizon_end = _horizon_end(state, step, run)
    past_horizon = _past_horizon(state, step, run)
    if run.kind is FORWARD and state.phase == "compensating":
        if past_horizon:
            return _Outcome()  # settled: it never happened
    elif spec is not None and spec.dedupes_by_key:
        return _retry(state, step, run, now, "confirmed absent; provider dedupes by key")
    elif past_horizon:
        return _retry(state, step, run, now, "confirmed absent after the commit horizon")
    if horizon_end is not None:
        return _reconcile(
            state, step, run, now, "absent: wait out the commit horizon", not_before=horizon_end
        )
    reason = "confirmed absent, but the tool neither dedupes by key nor declares a commit horizon"
    return _Outcome(escalation=escalate(state, step, run, reason, now))
