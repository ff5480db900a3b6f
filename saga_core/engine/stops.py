"""Stop conditions: when a saga's time limit or cost budget stops its forward work.

Pure rules over the folded state (``now`` passed in); ``decide`` and ``check_claim`` ask
them, the budget itself is data (:mod:`saga_core.definitions.budgets`).

* **Forward work is reserved.** A forward call may start only if the budget can pay for it
  *and* for one call of every forward step not yet called: ``spent + owed <= max_cost``,
  where a forward operation owes its cost while it is scheduled or has never been called
  under its current key. Registration refuses a budget below one call of every forward
  step, so only retries and re-claims eat into the slack; the retry that would leave too
  little to finish stops the saga before it is scheduled (:func:`cost_overrun`), and a
  claim re-checks it (:func:`claim_refusal`).
* **The time limit is a due time.** From ``started + time_limit_s`` no forward call is
  claimed; :func:`limit_passed` is what decide records first, and ``due_work`` reports it
  so the sweeper wakes a saga that waits (for an approval, a backoff, a lookup).
* **Exceeded.** The saga records ``BudgetExceeded`` with the reason; forward work stops
  (nothing new is scheduled or claimed, calls in flight still record their results).
  Before the pivot it then compensates or escalates, as ``on_exceeded`` says; after the
  pivot nothing can be undone and finishing means spending over the limit, so a person
  decides (:func:`must_escalate`). A saga whose forward work is all done finishes as usual.
* **Undoing is never stopped.** Once the saga compensates no limit applies.
* **A person may go on.** ``resume`` on a limit's escalation lifts both limits for the rest
  of the saga (the person takes the overrun on); ``cancel`` before the pivot compensates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from saga_core.contracts import StepKind
from saga_core.definitions.budgets import LimitBreach, OnExceeded, money
from saga_core.engine.decision_types import Decision, RetryAfterBackoff, ScheduleStep
from saga_core.engine.events import BudgetExceeded, Evidence, LimitName, SagaEvent
from saga_core.engine.state import FORWARD_DONE, RunStatus, SagaState, StepRun


@dataclass(frozen=True)
class StopAtLimit(Decision):
    """Record that a limit was exceeded: forward work stops from here on."""

    limit: LimitName
    spent: float
    allowed: float
    reason: str
    step_id: str | None = None

    def to_event(self, at: datetime) -> SagaEvent:
        """A BudgetExceeded."""
        return BudgetExceeded(at=at, limit=self.limit, spent=self.spent, allowed=self.allowed,
                              reason=self.reason, step_id=self.step_id)


def deadline(state: SagaState) -> datetime | None:
    """When the saga's time limit passes (None: no time limit, or not started)."""
    budget = state.definition.budget
    started = state.budget.started_at
    if budget is None or budget.time_limit_s is None or started is None:
        return None
    return started + timedelta(seconds=budget.time_limit_s)


def forward_work_remains(state: SagaState) -> bool:
    """Whether some forward operation is not yet done (succeeded, forced or skipped)."""
    return any(run.status not in FORWARD_DONE for run in state.forward.values())


def _owes(run: StepRun, scheduling: frozenset[str] = frozenset()) -> bool:
    """Whether a forward operation still owes one call: it is scheduled (or being scheduled
    now), or it has never been called under its current key and is not done."""
    if run.status is RunStatus.SCHEDULED or run.step_id in scheduling:
        return True
    return run.request_hash is None and run.status not in FORWARD_DONE


def committed_cost(state: SagaState, scheduling: Iterable[str] = ()) -> Decimal:
    """What the saga has spent plus what its forward work still owes (one call per
    operation that owes one; ``scheduling`` names forward runs about to be scheduled)."""
    pending = frozenset(scheduling)
    # A plain loop over the definition's cost table: decide and due_work ask this several
    # times per commit (a limit check, a claim check per scheduled run).
    cost = state.definition.call_cost
    owed = Decimal(0)
    for run in state.forward.values():
        if _owes(run, pending):
            owed += cost(run.step_id, StepKind.FORWARD)
    return state.budget.spent + owed


def limits_apply(state: SagaState) -> bool:
    """Whether the saga's limits still bind it: it declares some, runs forward, no breach is
    recorded yet, and no person lifted them."""
    ledger = state.budget
    return (
        state.definition.budget is not None
        and state.phase == "forward"
        and ledger.breach is None
        and not ledger.lifted
    )


def stopped_by(state: SagaState) -> LimitBreach | None:
    """The recorded breach that stops this saga's forward work (None: nothing stops it)."""
    ledger = state.budget
    if ledger.breach is None or ledger.lifted or not forward_work_remains(state):
        return None
    return ledger.breach


def must_escalate(state: SagaState) -> bool:
    """Whether a saga stopped at a limit goes to a person rather than compensating: its
    definition says so, or its pivot is passed (nothing can be undone any more)."""
    budget = state.definition.budget
    declared = budget.on_exceeded if budget is not None else OnExceeded.COMPENSATE
    return declared is OnExceeded.ESCALATE or state.pivot_passed


def limit_passed(
    state: SagaState, now: datetime, *, committed: Decimal | None = None
) -> StopAtLimit | None:
    """The breach decide records at ``now`` before anything else: the time limit passed,
    or what the saga spent and still owes is over its budget, while forward work remains.
    ``committed``: :func:`committed_cost` of ``state``, when the caller has it."""
    budget = state.definition.budget
    if budget is None or not limits_apply(state) or not forward_work_remains(state):
        return None
    due = deadline(state)
    started = state.budget.started_at
    if due is not None and started is not None and now >= due:
        return StopAtLimit(
            "time", (now - started).total_seconds(), float(budget.time_limit_s or 0),
            f"time limit of {budget.time_limit_s:g} s passed at {due.isoformat()}",
        )
    if budget.max_cost is not None:
        total = committed_cost(state) if committed is None else committed
        if total > money(budget.max_cost):
            return _over_budget(state, budget.max_cost, total, None)
    return None


def cost_overrun(state: SagaState, decisions: Iterable[Decision]) -> StopAtLimit | None:
    """The breach decide records instead of ``decisions`` when a forward call they schedule
    would leave the budget unable to pay for one call of every forward step still owed."""
    budget = state.definition.budget
    if budget is None or budget.max_cost is None or not limits_apply(state):
        return None
    allowed = money(budget.max_cost)
    scheduling: list[str] = []
    for decision in decisions:
        step_id = _forward_call(decision)
        if step_id is None:
            continue
        scheduling.append(step_id)
        committed = committed_cost(state, scheduling)
        if committed > allowed:
            return _over_budget(state, budget.max_cost, committed, step_id)
    return None


def _forward_call(decision: Decision) -> str | None:
    """The step whose forward call ``decision`` schedules, if it schedules one."""
    if isinstance(decision, ScheduleStep):
        return decision.step_id
    if isinstance(decision, RetryAfterBackoff) and decision.kind is StepKind.FORWARD:
        return decision.step_id
    return None


def _over_budget(
    state: SagaState, max_cost: float, committed: Decimal, step_id: str | None
) -> StopAtLimit:
    spent = state.budget.spent
    what = f"calling {step_id}" if step_id is not None else "the forward work still owed"
    return StopAtLimit(
        "cost", float(spent), max_cost,
        f"cost budget of {max_cost:g} exceeded: {what} would bring spent ({spent}) plus "
        f"still owed to {committed}",
        step_id,
    )


def claim_refusal(
    state: SagaState, run: StepRun, now: datetime, *, committed: Decimal | None = None
) -> str | None:
    """Why this call may not be claimed at ``now`` because of a limit (None: it may).
    Compensations are never refused: undoing is never stopped by a budget.

    ``committed``: :func:`committed_cost` of ``state``, when the caller has it (one who asks
    of several runs of the same state sums the saga's runs once, not once per run).
    """
    ledger = state.budget
    budget = state.definition.budget
    if run.kind is not StepKind.FORWARD or budget is None or ledger.lifted:
        return None
    if ledger.breach is not None:
        return f"forward work stopped: {ledger.breach.reason}"
    due = deadline(state)
    if due is not None and now >= due:
        return f"time limit passed at {due.isoformat()}"
    if budget.max_cost is not None:
        # Claiming a scheduled run moves its cost from owed to spent; a re-claim adds it.
        extra = Decimal(0) if _owes(run) else state.definition.call_cost(run.step_id, run.kind)
        total = (committed_cost(state) if committed is None else committed) + extra
        if total > money(budget.max_cost):
            return f"cost budget of {budget.max_cost:g} would be exceeded ({total})"
    return None


def limit_evidence(state: SagaState, breach: LimitBreach, now: datetime) -> Evidence:
    """What a person needs to decide about a saga stopped at a limit: the reason, the
    budget as it stands, and the options (resume over the limit; cancel before the pivot)."""
    passed = state.pivot_passed
    alternatives = ["resume"] if passed else ["resume", "cancel"]
    risk = ("the pivot is passed: nothing can be undone, the remaining forward steps are "
            "not done" if passed else "completed steps keep their effects until compensated")
    return Evidence(
        intended_action="forward work over the saga's limit",
        reason=f"{breach.reason}; forward work stopped",
        expected_result="resume: the limits are lifted and forward work goes on"
        + ("" if passed else "; cancel: completed steps are compensated"),
        residual_risk=risk,
        deadline=now + timedelta(seconds=state.definition.escalation_deadline_s),
        alternatives=alternatives,
        details={"budget": budget_summary(state)},
    )


def budget_summary(state: SagaState) -> dict[str, Any] | None:
    """The saga's limits as an operator sees them (None when it declares none): the
    deadline, the budget, spent and remaining, the breach, whether a person lifted them."""
    budget = state.definition.budget
    if budget is None:
        return None
    ledger = state.budget
    due = deadline(state)
    remaining = None
    if budget.max_cost is not None:
        remaining = float(money(budget.max_cost) - ledger.spent)
    exceeded = None
    if ledger.breach is not None:
        exceeded = {"limit": ledger.breach.limit, "reason": ledger.breach.reason,
                    "at": ledger.breach.at.isoformat()}
    return {
        "time_limit_s": budget.time_limit_s,
        "deadline": due.isoformat() if due is not None else None,
        "max_cost": budget.max_cost,
        "spent": float(ledger.spent),
        "remaining": remaining,
        "on_exceeded": str(budget.on_exceeded),
        "exceeded": exceeded,
        "lifted": ledger.lifted,
    }
