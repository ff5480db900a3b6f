"""When the sweeper looks at a swept saga again (workers.sweeper.retimed), on the in-memory
test kit: a re-published item waits out its window; a saga with nothing due is due when
next_due says; the commit of an in-memory orchestrator writes next_due with its append."""

from __future__ import annotations

from datetime import timedelta

from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from saga_core.contracts import StepKind
from saga_core.engine.due import next_due, republish_at
from sagafleet.testing import TestClock, TestFleet
from workers.sweeper import retimed, retimed_afresh, sweep_saga

QUEUE_WAIT = timedelta(seconds=10)
CAP = timedelta(minutes=5)


def _started() -> tuple[TestFleet, str]:
    fleet = TestFleet(clock=TestClock())
    return fleet, str(fleet.client().start("trip", TRIP_INPUT, key="k").saga_id)


def test_a_commit_writes_the_sagas_next_due_time_with_its_append() -> None:
    # given a trip just started (its first steps scheduled, their messages published)
    fleet, saga_id = _started()
    state = fleet.log.load(saga_id).state
    # then its due time is when those steps are overdue, as next_due says
    (due,) = fleet.log.due(fleet.clock() + timedelta(days=1), 10)
    assert due.saga_id == saga_id
    assert due.due_at == next_due(state, timedelta(0), after=fleet.clock())


def test_a_republished_item_is_not_due_again_before_its_window_ends() -> None:
    # given a trip whose first steps' messages were lost, swept after the queue wait
    fleet, saga_id = _started()
    fleet.clock.advance(30)
    loaded = fleet.log.load(saga_id)
    swept = sweep_saga(fleet.orchestrator, loaded, QUEUE_WAIT)
    assert len(swept.republish) == 2 and swept.committed is None
    # when it is re-timed
    now = fleet.clock()
    again = retimed(swept, now, QUEUE_WAIT, CAP)
    # then it is due when the holds' window ends, at the version swept
    (item, _) = swept.due
    assert (again.saga_id, again.version) == (saga_id, loaded.version)
    assert again.due_at == republish_at(item.due_since, now, QUEUE_WAIT, CAP) > now


def test_a_saga_with_nothing_due_is_due_when_next_due_says() -> None:
    # given a trip swept before its steps are overdue
    fleet, saga_id = _started()
    loaded = fleet.log.load(saga_id)
    swept = sweep_saga(fleet.orchestrator, loaded, QUEUE_WAIT)
    assert swept.due == ()
    # then it is re-timed to next_due, at the version read
    now = fleet.clock()
    again = retimed(swept, now, QUEUE_WAIT, CAP)
    assert again.due_at == next_due(loaded.state, QUEUE_WAIT, after=now) > now


def test_retiming_from_what_the_sweep_found_equals_asking_again() -> None:
    # given trips swept at moments where nothing is due, where their holds' messages are
    # overdue (re-published, nothing committed), and where a lease expired (a commit)
    fleet, saga_id = _started()
    other = str(fleet.client().start("trip", {**TRIP_INPUT, "nights": 2}, key="k2").saga_id)
    fleet.executor.claim(StepCommand(saga_id=other, step_id="hold_flight",
                                     kind=StepKind.FORWARD, attempt=1))  # its lease runs out
    swept_sagas = []
    for seconds in (0, 30, 600, 3600):
        fleet.clock.advance(seconds)
        for found in (saga_id, other):
            swept_sagas.append(sweep_saga(fleet.orchestrator, fleet.log.load(found), QUEUE_WAIT))
    assert any(s.due and s.committed is None for s in swept_sagas)
    assert any(s.committed is not None for s in swept_sagas)
    # then the re-timing that reuses the sweep's findings equals the plain one's, at the
    # sweep's instant (as the sweeper re-times) and at any later one
    for swept in swept_sagas:
        for now in (swept.at, swept.at + timedelta(seconds=5)):
            assert (retimed(swept, now, QUEUE_WAIT, CAP)
                    == retimed_afresh(swept, now, QUEUE_WAIT, CAP))
