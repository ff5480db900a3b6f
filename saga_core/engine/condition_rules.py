"""The rules of declared conditions: postconditions, step timeouts and compensation deadlines.

Pure, with ``now`` passed in; :func:`saga_core.engine.decide.decide` asks them, ``due_work`` asks
:func:`condition_due` so the sweeper wakes a saga when a declared time passes.

* **A receipt is not enough where the tool declares a postcondition.** The receipt is
  recorded (the run is ``verifying``, in doubt, and advances nothing); the postcondition is
  then observed on the receipt or through ``lookup(key)``, looked up again with backoff
  until its horizon, the last lookup at the horizon itself. Observed → ``PostconditionObserved``
  and the run succeeds. Not observed when a lookup at or after the horizon still does not
  show it (or the lookups allowed are spent) → ``PostconditionNotObserved`` and the saga
  escalates with the reason: never advanced.
* **A step timeout bounds one call from its claim** (``StepStarted.timeout_at``). A call
  still unanswered then was dispatched, so its outcome is unknown: ``DeadlineMissed`` turns
  the run ``unknown`` and the step's ``on_timeout`` follows — ``retry`` (the default: look
  it up by key, then retry under the same key where that is safe), ``compensate`` (before
  the pivot; the run is still looked up so an effect found is undone) or ``escalate``.
* **A compensation deadline bounds the undo from the moment compensation began.** Missed
  (the compensation not done), ``DeadlineMissed`` is recorded once and ``on_deadline``
  follows: ``escalate`` (the default) or ``retry`` (go on undoing).

An escalating rule returns the fact and the escalation together, so the pause is recorded
once and an operator's answer is never followed by the same escalation again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from saga_core.contracts import StepKind
from saga_core.definitions.conditions import DeadlinePolicy, Postcondition
from saga_core.definitions.definition import StepDefinition
from saga_core.engine.backoff import backoff_delay
from saga_core.engine.decision_types import (
    Decision,
    Escalate,
    MissDeadline,
    MissPostcondition,
    ObservePostcondition,
    Reconcile,
)
from saga_core.engine.escalations import escalate
from saga_core.engine.state import IN_DOUBT, RunStatus, SagaState, StepRun, evolve

FORWARD, COMPENSATION = StepKind.FORWARD, StepKind.COMPENSATION
_UNDO_NEEDED = frozenset({RunStatus.SUCCEEDED, RunStatus.FORCED}) | IN_DOUBT
_UNDONE = frozenset({RunStatus.SUCCEEDED, RunStatus.FORCED, RunStatus.SKIPPED})

ConditionDue = Literal["timeout", "deadline"]


def condition_facts(state: SagaState, now: datetime) -> list[Decision]:
    """Facts about declared conditions at ``now``: calls past their timeout, postconditions
    observed or given up on, compensations past their deadline. At most one escalation,
    returned right after the fact that causes it."""
    if not state.definition.declares_conditions:
        return []
    facts: list[Decision] = []
    for run in [*state.forward.values(), *state.compensation.values()]:
        step = state.definition.step(run.step_id)
        if timed_out(run, now) and run.timeout_at is not None:
            batch = _timeout(state, step, run, run.timeout_at, now)
        elif run.status is RunStatus.VERIFYING and not run.postcondition_missed:
            batch = _verification(state, step, run, now)
        else:
            continue
        if _escalates(batch):  # recorded alone, with its cause
            return batch
        facts += batch
    for step_id, run, due in _deadlines_passed(state, now):
        batch = _deadline(state, state.definition.step(step_id), run, due, now)
        if _escalates(batch):
            return batch
        facts += batch
    return facts


def _escalates(batch: list[Decision]) -> bool:
    return any(isinstance(decision, Escalate) for decision in batch)


def timed_out(run: StepRun, now: datetime) -> bool:
    """Whether this run's call is still unanswered at or after its timeout."""
    return (
        run.status is RunStatus.STARTED
        and run.timeout_at is not None
        and now >= run.timeout_at
        and run.timed_out_attempt != run.attempt
    )


def timeout_policy(step: StepDefinition, kind: StepKind) -> DeadlinePolicy:
    """What follows a timed-out call: the step's ``on_timeout`` (default retry); a
    compensation's call is always looked up and retried."""
    if kind is COMPENSATION:
        return "retry"
    return step.on_timeout or "retry"


def _timeout(
    state: SagaState, step: StepDefinition, run: StepRun, timeout_at: datetime, now: datetime
) -> list[Decision]:
    policy = timeout_policy(step, run.kind)
    limit = state.definition.step_timeout_s(step.id, run.kind)
    reason = (
        f"the {run.kind} call of {step.id} (attempt {run.attempt}) ran past its timeout"
        f"{f' of {limit:g} s' if limit is not None else ''} at {timeout_at.isoformat()}; "
        f"its outcome is unknown (policy: {policy})"
    )
    missed = MissDeadline(step.id, run.kind, run.attempt, "step_timeout", timeout_at,
                          policy, reason)
    if policy != "escalate":
        return [missed]
    return [missed, _escalate_after(state, step, missed, reason, now)]


def timeout_rejection(state: SagaState, step: StepDefinition, run: StepRun) -> str | None:
    """The reason to compensate when a forward call timed out under ``on_timeout:
    compensate`` (validation allows that only before the pivot)."""
    # The run's own fields first: decide asks this of every step on every call, and almost
    # no run ever timed out.
    if run.timed_out_attempt == 0 or run.timed_out_attempt != run.attempt:
        return None
    if run.kind is not FORWARD or state.phase != "forward" or state.pivot_passed:
        return None
    if timeout_policy(step, FORWARD) != "compensate":
        return None
    if run.status in (RunStatus.FORCED, RunStatus.SKIPPED):
        return None  # a person already decided about it
    return f"step {step.id} ran past its timeout (attempt {run.attempt}); policy: compensate"


# -- postconditions --------------------------------------------------------------------------


def postcondition_of(state: SagaState, run: StepRun) -> Postcondition | None:
    """The postcondition the run's tool declares (None: its receipt alone advances it)."""
    spec = state.definition.tool_spec(run.step_id, run.kind)
    return spec.postcondition if spec is not None else None


def horizon_end(state: SagaState, run: StepRun) -> datetime | None:
    """Until when a verifying run's postcondition may still be observed."""
    post = postcondition_of(state, run)
    if post is None or run.verify_since is None:
        return None
    return run.verify_since + timedelta(seconds=post.horizon_s)


def _observed(post: Postcondition, run: StepRun) -> tuple[bool, str]:
    """Whether the evidence so far shows the postcondition, and what it shows."""
    found = run.lookup_receipt if run.verify_lookup == "found" else None
    if post.observe == "lookup" and found is None:
        seen = run.verify_lookup or "not yet looked up"
        return False, f"lookup(key) has not found the effect ({seen})"
    receipt = found or run.receipt
    if receipt is None:
        return False, "no receipt to check"
    unmet = post.unmet(receipt)
    if unmet:
        return False, "receipt does not show " + " and ".join(c.describe() for c in unmet)
    how = "found by lookup(key)" if found is not None else "shown by the receipt"
    return True, how


def _verification(
    state: SagaState, step: StepDefinition, run: StepRun, now: datetime
) -> list[Decision]:
    post = postcondition_of(state, run)
    end = horizon_end(state, run)
    if post is None or end is None:
        return []
    observed, detail = _observed(post, run)
    found = run.lookup_receipt if run.verify_lookup == "found" else None
    receipt = found or run.receipt
    if observed and receipt is not None:
        how: Literal["lookup", "receipt"] = "lookup" if found is not None else "receipt"
        return [ObservePostcondition(step.id, run.kind, run.attempt, run.operation_key, how,
                                     receipt, f"{post.describe()}: {detail}")]
    policy = state.definition.retry_policy(step.id, run.kind)
    looked_at_horizon = run.verify_lookup_at is not None and run.verify_lookup_at >= end
    if not looked_at_horizon and run.reconciliations < policy.max_reconciliations:
        return []  # keep looking: verify_next schedules the lookup
    reason = (
        f"postcondition of {step.id} not observed within its horizon "
        f"({end.isoformat()}): {detail}; expected {post.describe()}. The receipt alone "
        "does not advance the saga"
    )
    missed = MissPostcondition(step.id, run.kind, run.attempt, run.operation_key, end, reason)
    return [missed, _escalate_after(state, step, missed, reason, now)]


def verify_next(state: SagaState, step: StepDefinition, run: StepRun) -> Reconcile | None:
    """The next lookup of a verifying run whose postcondition is not observed yet: at once
    first, then with backoff, never later than the horizon (the last one at the horizon)."""
    end = horizon_end(state, run)
    if end is None or run.postcondition_missed or run.verify_since is None:
        return None
    policy = state.definition.retry_policy(step.id, run.kind)
    if run.reconciliations == 0:
        not_before = run.verify_since
    elif run.reconciliations + 1 >= policy.max_reconciliations:
        not_before = end
    else:
        base = run.changed_at or run.verify_since
        not_before = min(base + backoff_delay(policy, run.operation_key, run.reconciliations),
                         end)
    return Reconcile(step.id, run.kind, run.attempt, not_before,
                     "postcondition not yet observed: look the effect up by key")


# -- compensation deadlines ------------------------------------------------------------------


def compensation_deadline(state: SagaState, step_id: str) -> datetime | None:
    """When the step's compensation must be done (None: no deadline, or not compensating)."""
    started = state.compensation_started_at
    if started is None or state.phase != "compensating":
        return None
    seconds = state.definition.compensation_deadline_s(step_id)
    if seconds is None:
        return None
    return started + timedelta(seconds=seconds)


def _deadlines_passed(
    state: SagaState, now: datetime
) -> list[tuple[str, StepRun, datetime]]:
    passed = []
    for step_id, run in state.compensation.items():
        due = compensation_deadline(state, step_id)
        if due is None or now < due or run.deadline_missed or run.status in _UNDONE:
            continue
        if state.forward[step_id].status not in _UNDO_NEEDED:
            continue  # nothing to undo: the deadline binds nothing
        passed.append((step_id, run, due))
    return passed


def _deadline(
    state: SagaState, step: StepDefinition, run: StepRun, due: datetime, now: datetime
) -> list[Decision]:
    compensation = step.compensation
    policy: DeadlinePolicy = (compensation.on_deadline if compensation else None) or "escalate"
    reason = (
        f"the compensation of {step.id} was not done by its deadline {due.isoformat()} "
        f"(it is {run.status}; policy: {policy})"
    )
    missed = MissDeadline(step.id, COMPENSATION, run.attempt, "compensation_deadline", due,
                          policy, reason)
    if policy != "escalate":
        return [missed]
    return [missed, _escalate_after(state, step, missed, reason, now)]


def _escalate_after(
    state: SagaState, step: StepDefinition, fact: MissDeadline | MissPostcondition,
    reason: str, at: datetime,
) -> Decision:
    """The escalation that follows ``fact``, its evidence read from the state after it."""
    after = evolve(state, fact.to_event(at=at))
    run = after.run(fact.step_id, fact.kind)
    return escalate(after, step, run, reason, at)


# -- waking the saga -------------------------------------------------------------------------


def condition_due(state: SagaState, now: datetime) -> list[tuple[StepRun, ConditionDue, datetime]]:
    """Declared times that passed at ``now`` and wait for ``decide`` to record them: calls
    past their timeout, compensations past their deadline (the sweeper's wake-ups)."""
    due: list[tuple[StepRun, ConditionDue, datetime]] = []
    if not state.definition.declares_conditions:
        return due
    for run in [*state.forward.values(), *state.compensation.values()]:
        if timed_out(run, now) and run.timeout_at is not None:
            due.append((run, "timeout", run.timeout_at))
    for _step_id, run, passed in _deadlines_passed(state, now):
        due.append((run, "deadline", passed))
    return due
