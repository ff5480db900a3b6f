"""Pure checks for the worker fleet: may this attempt be claimed now, and what work is due.

A worker claims by appending ``StepStarted`` with the stream's expected version after
:func:`check_claim` said yes; the sweeper re-enqueues what :func:`due_work` lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from saga_core.approval.policy import grant_problem
from saga_core.contracts import StepKind
from saga_core.engine.condition_rules import condition_due
from saga_core.engine.decide import decide
from saga_core.engine.decision_types import Decision
from saga_core.engine.state import RunStatus, SagaState, StepRun
from saga_core.engine.stops import claim_refusal, committed_cost, deadline, limit_passed


@dataclass(frozen=True)
class ClaimVerdict:
    """Whether an attempt is claimable now; ``reason`` says why (also when it is).
    ``ask_again``: refused because its grant no longer holds, so ``decide`` asks a person
    again (the refusing worker records that instead of the claim)."""

    ok: bool
    reason: str
    ask_again: bool = False

    def __bool__(self) -> bool:
        return self.ok


def _blocked(state: SagaState, kind: StepKind, step_id: str | None = None) -> str | None:
    """Why no operation of this kind may start in this saga right now, if anything stops it."""
    if not state.started:
        return "saga not started"
    if state.finished is not None:
        return f"saga finished ({state.finished})"
    if state.escalation is not None:
        return "saga awaits manual intervention"
    if kind is StepKind.FORWARD and state.phase == "compensating":
        return "saga is compensating; forward work stopped"
    if kind is StepKind.FORWARD and state.cancel_requested and not state.pivot_passed:
        return "cancel requested"
    if kind is StepKind.COMPENSATION and state.phase != "compensating" and (
            step_id is None or (step_id not in state.retired and step_id != state.correcting)):
        # A step a plan revision dropped (saga_core.agents.replans) is undone while going forward,
        # and a pivot's correction an operator chose (saga_core.engine.corrections) runs.
        return "saga is not compensating"
    return None


def check_claim(
    state: SagaState, step_id: str, kind: StepKind, attempt: int, now: datetime, *,
    args: dict[str, Any] | None = None,
) -> ClaimVerdict:
    """Whether (step, kind, attempt) is claimable at ``now``: scheduled, due, unheld, not done.

    ``args``: the operation's resolved arguments, when the caller has just resolved them (a
    claim ahead), for the grant check instead of resolving them again."""
    blocked = _blocked(state, kind, step_id)
    if blocked is not None:
        return ClaimVerdict(False, blocked)
    runs = state.forward if kind is StepKind.FORWARD else state.compensation
    run = runs.get(step_id)
    if run is None:
        return ClaimVerdict(False, f"no {kind} operation for step {step_id!r}")
    if run.attempt != attempt:
        return ClaimVerdict(False, f"stale attempt {attempt}; current attempt is {run.attempt}")
    over_limit = claim_refusal(state, run, now)
    if over_limit is not None:
        return ClaimVerdict(False, over_limit)
    if run.status is RunStatus.SCHEDULED:
        if run.not_before is not None and now < run.not_before:
            return ClaimVerdict(False, f"not due before {run.not_before.isoformat()}")
        refused = _refused_for_grant(state, run, now, args)
        return refused if refused is not None else ClaimVerdict(True, "scheduled and due")
    if run.status is RunStatus.STARTED:
        lease = run.lease_expires_at
        if lease is not None and now >= lease:
            spec = state.definition.tool_spec(step_id, kind)
            if spec is not None and spec.dedupes_by_key:
                refused = _refused_for_grant(state, run, now, args)
                return refused if refused is not None else ClaimVerdict(
                    True, "lease expired; the provider dedupes by key")
            return ClaimVerdict(False, "lease expired: outcome ambiguous, reconcile first")
        return ClaimVerdict(False, f"claimed by {run.worker_id} until {lease}")
    return ClaimVerdict(False, f"operation is {run.status}")


def _refused_for_grant(state: SagaState, run: StepRun, now: datetime,
                       args: dict[str, Any] | None) -> ClaimVerdict | None:
    """A refusal when the run is gated and its grant does not hold at ``now`` (the grant is
    re-checked at claim time, not only when the step was scheduled)."""
    problem = grant_problem(state, run, now, args=args)
    if problem is None:
        return None
    return ClaimVerdict(False, f"approval needed again: {problem}", ask_again=True)


DueAction = Literal[
    "execute", "reconcile", "lease_expired", "approval_expired", "limit_passed", "timeout",
    "deadline", "decide",
]


@dataclass(frozen=True)
class DueWork:
    """One piece of work the log says is due, for the sweeper to (re-)enqueue and count."""

    saga_id: str
    step_id: str | None
    kind: StepKind | None
    attempt: int
    action: DueAction
    due_since: datetime


def due_at(run: StepRun, queue_wait: timedelta) -> datetime | None:
    """When a scheduled or reconciling run is overdue for a (re-)enqueue (None: not timed)."""
    if run.not_before is None:
        return None
    delayed = run.scheduled_at is not None and run.not_before > run.scheduled_at
    # A delayed retry was never enqueued (no broker ETAs): it is due at not_before. Work that
    # was enqueued immediately is only overdue once it waited longer than the queue normally does.
    return run.not_before if delayed else run.not_before + queue_wait


def _claimable(state: SagaState, run: StepRun, now: datetime, committed: Decimal | None) -> bool:
    """Whether nothing blocks a claim of ``run`` at ``now`` (its order, a limit); asked of
    scheduled runs only. ``committed``: the saga's committed cost, summed once per state
    (None: no budget asks for it)."""
    return (_blocked(state, run.kind, run.step_id) is None
            and claim_refusal(state, run, now, committed=committed) is None)


def due_work(
    state: SagaState, now: datetime, queue_wait: timedelta, *,
    decided: Sequence[Decision] | None = None,
) -> list[DueWork]:
    """Work overdue at ``now``: unclaimed schedules, due lookups, expired leases and approvals,
    a time limit that passed (whatever the saga waits for: a claim, approval, backoff), a call
    past its step timeout and a compensation past its deadline
    (saga_core.engine.condition_rules).

    ``decided``: what ``decide(state, now)`` answers, when the caller has it (a commit that
    has just settled: nothing), so it is not asked again when nothing else is due.
    """
    if not state.started or state.finished is not None or state.escalation is not None:
        return []
    items: list[DueWork] = []
    # The saga's committed cost, summed once for the limit and every overdue schedule.
    budget = state.definition.budget
    committed = (committed_cost(state) if budget is not None and budget.max_cost is not None
                 else None)
    passed = limit_passed(state, now, committed=committed)
    if passed is not None:
        # Recorded by decide when the sweeper advances the saga; its schedules wait for that.
        items.append(DueWork(state.saga_id, None, None, 0, "limit_passed", deadline(state) or now))
    conditions = condition_due(state, now)
    for run, action, since in conditions:
        items.append(DueWork(state.saga_id, run.step_id, run.kind, run.attempt, action, since))
    timed = {(run.step_id, run.kind) for run, action, _ in conditions if action == "timeout"}
    for run in [*state.forward.values(), *state.compensation.values()]:
        item: tuple[DueAction, datetime] | None = None
        if run.status is RunStatus.SCHEDULED:
            # Timed first: the claim checks cost more (a cost budget sums every run). A claim
            # refused for want of a grant is not due: decide asks again instead.
            due = due_at(run, queue_wait)
            if due is None or now < due:
                continue
            if _claimable(state, run, now, committed) and grant_problem(state, run, now) is None:
                item = ("execute", due)
        elif run.status is RunStatus.RECONCILING:
            due = due_at(run, queue_wait)
            if due is not None and now >= due:
                item = ("reconcile", due)
        elif run.status is RunStatus.STARTED and run.lease_expires_at is not None:
            if now >= run.lease_expires_at and (run.step_id, run.kind) not in timed:
                item = ("lease_expired", run.lease_expires_at)
        elif run.status is RunStatus.AWAITING_APPROVAL and run.approval is not None:
            approval = run.approval
            expiry = approval.grant_expires_at if approval.status == "granted" else None
            expiry = expiry or approval.expires_at
            if now >= expiry:
                item = ("approval_expired", expiry)
        if item is not None:
            items.append(DueWork(state.saga_id, run.step_id, run.kind, run.attempt, *item))
    if not items and (decide(state, now) if decided is None else decided):
        items.append(DueWork(state.saga_id, None, None, 0, "decide", now))
    return items
