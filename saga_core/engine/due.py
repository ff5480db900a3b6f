"""When a saga next needs the sweeper: the time its due-time index holds, and how often an
overdue message may be sent again.

``due_work(state, now)`` answers "what is due now?"; :func:`next_due` answers "from when on
will it list anything?", so a store can keep that instant beside the saga (written with
every commit) and a sweeper can read only the sagas whose instant has passed, instead of
folding every active saga every pass.

Exactly ``due_work``'s rules, by construction: ``due_work(state, t)`` depends on ``t`` only
through comparisons of ``t`` with instants the state holds (a schedule's ``not_before``, plus
the queue wait when it was enqueued at once; a lease, a call's timeout, an approval's or a
grant's expiry, a compensation deadline, the saga's time limit), and ``decide``, which it
asks when nothing else is listed, compares ``t`` with the same instants. Between two
consecutive instants its answer cannot change, so the first moment it lists work is
``after`` itself or one of those instants; :func:`next_due` asks ``due_work`` there, in
time order, and returns the first that lists work. The property test
(tests/unit/saga_core/engine/test_due.py) checks it against ``due_work`` at random clock times.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import datetime, timedelta

from saga_core.contracts import StepKind
from saga_core.engine.claims import DueAction, DueWork, due_at, due_work
from saga_core.engine.condition_rules import compensation_deadline
from saga_core.engine.decision_types import Decision
from saga_core.engine.state import RunStatus, SagaState, StepRun
from saga_core.engine.stops import deadline

#: The statuses in which ``due_work`` compares ``now`` with a run's schedule (``due_at``).
_WAITING_FOR_A_WORKER = frozenset({RunStatus.SCHEDULED, RunStatus.RECONCILING})

#: What identifies one piece of due work across passes: (step_id, kind, attempt, action).
DueKey = tuple[str | None, StepKind | None, int, DueAction]


def due_key(item: DueWork) -> DueKey:
    """The identity of a due item (the same overdue schedule on every pass has the same key)."""
    return (item.step_id, item.kind, item.attempt, item.action)


def next_due(
    state: SagaState, queue_wait: timedelta, *, after: datetime,
    exclude: Collection[DueKey] = (), decided: Sequence[Decision] | None = None,
    known: Sequence[DueWork] | None = None,
) -> datetime | None:
    """The earliest instant at or after ``after`` at which ``due_work(state, t, queue_wait)``
    lists an item whose key is not in ``exclude``; None when none will ever be listed
    without a new event (the saga finished, waits for a person, or has nothing timed).

    ``exclude``: items the caller has just dealt with without a commit (a sweeper that
    re-published an overdue schedule) and times itself; the rest of the saga still counts.
    ``decided``: what ``decide`` answers for this state at ``after``, when the caller has it
    (a commit that settled, then claimed ahead: nothing), so ``due_work`` there does not ask
    it again: one decide less per commit (``tests/unit/saga_core/engine/test_due.py`` holds
    the two answers equal). ``known``: what ``due_work(state, after, queue_wait)`` lists, when the
    caller has just asked it (a sweeper re-timing the saga it swept): not asked again.
    """
    if not state.started or state.finished is not None or state.escalation is not None:
        return None
    later = sorted({at for at in _instants(state, queue_wait) if at > after})
    for at in (after, *later):
        if at == after and known is not None:
            listed = known
        else:
            listed = due_work(state, at, queue_wait,
                              decided=decided if at == after else None)
        if any(due_key(item) not in exclude for item in listed):
            return at
    return None


def _instants(state: SagaState, queue_wait: timedelta) -> Iterator[datetime]:
    """Every instant at which ``due_work``'s or ``decide``'s answer for this state may change
    (some are never reached, or change nothing: :func:`next_due` asks ``due_work`` at each)."""
    limit = deadline(state)
    if limit is not None:
        yield limit
    for run in state.forward.values():
        yield from _run_instants(run, queue_wait)
    for step_id, run in state.compensation.items():
        yield from _run_instants(run, queue_wait)
        undo_by = compensation_deadline(state, step_id)
        if undo_by is not None:
            yield undo_by


def _run_instants(run: StepRun, queue_wait: timedelta) -> Iterator[datetime]:
    # A schedule's due time counts only while the run waits for a claim or a lookup, a lease
    # and a call's timeout only while the run is started (due_work's and decide's rules):
    # done runs keep these fields, and each instant left in would cost next_due one more
    # due_work (a decide) on every commit.
    scheduled = due_at(run, queue_wait)
    if scheduled is not None and run.status in _WAITING_FOR_A_WORKER:
        yield scheduled
    if run.status is RunStatus.STARTED:
        if run.lease_expires_at is not None:
            yield run.lease_expires_at
        if run.timeout_at is not None:
            yield run.timeout_at
    approval = run.approval
    if approval is not None:
        yield approval.expires_at
        if approval.grant_expires_at is not None:
            yield approval.grant_expires_at


def republish_at(
    due_since: datetime, now: datetime, base: timedelta, cap: timedelta
) -> datetime:
    """When an item overdue since ``due_since``, re-published at ``now``, may be re-published
    again: windows that double from ``base`` (at due_since + base, + 3 base, + 7 base, ...)
    and, once a window would exceed ``cap``, every ``cap``. With nobody consuming, the broker
    gets one more copy per window, not one per sweeper pass.

    Pure and memoryless: the caller keeps only the returned instant (the due-time index), and
    a sweeper that lost it (a crash) at worst sends one copy early.
    """
    if base <= timedelta(0) or cap < base:
        raise ValueError(f"republish windows need 0 < base <= cap (base {base}, cap {cap})")
    edge, window = due_since + base, base
    while edge <= now:
        if window >= cap:  # from here on a fixed step: jump there without looping
            steps = (now - edge) // cap + 1
            return edge + steps * cap
        window = min(window * 2, cap)
        edge += window
    return edge
