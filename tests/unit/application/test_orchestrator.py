"""The orchestrator on a TestFleet's in-memory saga log (no servers): what a commit plans,
records, claims ahead and leaves to publish; the one retry loop after a lost race; a sweep of
one saga.

(Absorbs the former tests/unit/fleet/test_commit_api.py.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from application.claiming import ClaimAhead
from application.client import SagaClient
from application.messages import StepCommand
from application.orchestrator import MAX_RACES, Orchestrator, RaceLost
from events import ConcurrencyError
from events.saga_log.port import LoadedSaga
from saga_core import resolve_command
from saga_core.access.roles import Principal
from saga_core.contracts import StepKind
from saga_core.engine.events import (
    CancelRequested,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
)
from saga_core.errors import SagaError
from sagafleet.testing import TestClock, TestFleet
from workers.sweeper import sweep_saga

TRIP_INPUT = {
    "customer_email": "ada@example.com", "flight_id": "FL1", "hotel_id": "HT1", "nights": 1,
    "amount": 10_000, "currency": "EUR", "card_token": "tok_4242",
}
LEASE = timedelta(seconds=30)
AHEAD = ClaimAhead(worker_id="w1", lease=LEASE)


class Published:
    """The commands a caller published, in order (a publisher that only remembers)."""

    def __init__(self) -> None:
        self.commands: list[StepCommand] = []

    def publish(self, commands: Sequence[StepCommand]) -> int:
        self.commands.extend(commands)
        return len(commands)


class RacesLost:
    """Counts what the orchestrator tells of lost races (a worker's ``races_lost``)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@pytest.fixture
def fleet() -> TestFleet:
    """The test kit's fleet: the trip definition on its tools' catalogue, in memory."""
    return TestFleet()


@pytest.fixture
def clock(fleet: TestFleet) -> TestClock:
    """The fleet's clock, moved by hand."""
    return fleet.clock


@pytest.fixture
def races_lost() -> RacesLost:
    return RacesLost()


@pytest.fixture
def orchestrator(fleet: TestFleet, races_lost: RacesLost) -> Orchestrator:
    """An orchestrator of its own on the fleet's log, telling ``races_lost`` of lost races."""
    return Orchestrator(fleet.log, fleet.clock, queue_wait=timedelta(seconds=10),
                        on_race_lost=races_lost, windows=fleet.gate_windows)


@pytest.fixture
def started(fleet: TestFleet, orchestrator: Orchestrator):
    """Start a trip through a client on ``orchestrator``, publishing to ``published``."""

    def start(published: Published) -> LoadedSaga:
        client = SagaClient(orchestrator, fleet.definitions, fleet.catalogue,
                            secrets=fleet.secrets, publisher=published,
                            principal=Principal.in_process_agent("default", "agent"))
        return orchestrator.log.load(client.start("trip", TRIP_INPUT, key="k").saga_id)

    return start


def test_a_start_commits_once_and_wakes_one_worker_for_the_parallel_holds(orchestrator, started):
    # given a client that publishes after its commit
    published = Published()
    # when it starts a trip, whose two holds may run side by side
    loaded = started(published)
    # then both holds are scheduled in the start's own commit, and one message went out
    scheduled = [e.step_id for e in loaded.events if isinstance(e, StepScheduled)]
    assert sorted(scheduled) == ["hold_flight", "hold_hotel"]
    assert [c.step_id for c in published.commands] == [scheduled[0]]


def test_a_plan_is_a_value_that_writes_nothing_until_written(orchestrator, started, clock):
    # given a started trip
    loaded = started(Published())
    cancel = CancelRequested(at=clock(), actor="ops", reason="changed my mind")
    # when a commit is planned on it
    plan = orchestrator.plan_commit(loaded, [cancel], actor="ops")
    # then the plan holds the given event first, decide's after it, at the loaded version,
    # and the log is untouched
    assert plan.events[0] == cancel and len(plan.events) > 1
    assert plan.expected_version == loaded.version and plan.saga_id == loaded.saga_id
    assert plan.state.cancel_requested and plan.now == clock()
    assert orchestrator.log.load(loaded.saga_id).version == loaded.version
    # and when it is written, exactly its events are appended after that version
    committed = orchestrator.write(plan)
    assert committed.events == plan.events
    assert committed.loaded.version == loaded.version + len(plan.events)
    assert orchestrator.log.load(loaded.saga_id).version == committed.loaded.version


def test_a_commit_that_claims_ahead_takes_the_due_steps_in_the_same_append(orchestrator, started):
    # given a started trip
    loaded = started(Published())
    # when a worker commits asking to claim ahead
    committed = orchestrator.commit(loaded, [], claim_ahead=AHEAD)
    # then both holds are claimed in one append and nothing is left to wake anyone for
    assert sorted(c.step_id for c in committed.claimed) == ["hold_flight", "hold_hotel"]
    assert committed.wake_ups == () and committed.commands == ()
    assert committed.loaded.version == loaded.version + 2
    assert orchestrator.log.load(loaded.saga_id).version == committed.loaded.version
    # and each claim is the worker's, for its lease, for the request its step resolves to
    started = {e.step_id: e for e in committed.events if isinstance(e, StepStarted)}
    for command, resolved in zip(committed.claimed, committed.resolved, strict=True):
        expected = resolve_command(loaded.state, command.step_id, command.kind)
        assert resolved == expected
        event = started[command.step_id]
        assert (event.worker_id, event.request_hash, event.operation_key) == (
            "w1", expected.request_hash, expected.operation_key)
        assert event.lease_expires_at == event.at + LEASE


def test_a_commit_on_a_stale_saga_is_refused_and_writes_nothing(orchestrator, started):
    # given a saga someone else wrote to after we read it
    stale = started(Published())
    moved = orchestrator.commit(stale, [], claim_ahead=AHEAD).loaded
    # when we commit on what we read, then the log refuses it and keeps what it had
    with pytest.raises(ConcurrencyError):
        orchestrator.commit(stale, [], claim_ahead=ClaimAhead(worker_id="w2", lease=LEASE))
    assert orchestrator.log.load(stale.saga_id).version == moved.version


def test_attempts_read_the_saga_afresh_after_a_lost_race_and_count_it(orchestrator, started,
                                                                       races_lost):
    # given a saga someone else wrote to after we read it
    stale = started(Published())
    orchestrator.commit(stale, [], claim_ahead=AHEAD)
    # when we write in the orchestrator's retry loop, starting from what we read
    seen: list[int] = []
    for attempt in orchestrator.attempts(stale.saga_id, known=stale):
        with attempt:
            seen.append(attempt.loaded.version)
            committed = orchestrator.commit(
                attempt.loaded, [], claim_ahead=ClaimAhead(worker_id="w2", lease=LEASE))
    # then the first attempt lost its race, the second ran on a fresh read (where nothing
    # is left to claim), and the loop ended there
    assert seen == [stale.version, stale.version + 2]
    assert committed.claimed == () and races_lost.count == 1


def test_attempts_end_after_the_first_that_lost_no_race(orchestrator, started, races_lost):
    # given a started saga
    loaded = started(Published())
    # when an attempt writes nothing at all
    tries = [attempt.loaded.version for attempt in orchestrator.attempts(
        loaded.saga_id, known=loaded)]
    # then there was one attempt, on the state given, and no race was counted
    assert tries == [loaded.version] and races_lost.count == 0


def test_attempts_let_any_other_error_out_at_once(orchestrator, started, races_lost):
    # given a started saga and an attempt that fails for a reason other than a race
    loaded = started(Published())
    tries = 0
    # then the error leaves the loop on the first attempt, uncounted
    with pytest.raises(KeyError):
        for attempt in orchestrator.attempts(loaded.saga_id, known=loaded):
            with attempt:
                tries += 1
                raise KeyError("not a race")
    assert tries == 1 and races_lost.count == 0


def test_attempts_give_up_with_race_lost_which_is_a_saga_error(orchestrator, started, races_lost):
    # given a saga whose every commit meets a moved stream
    loaded = started(Published())
    tries = 0
    # then the loop gives up with RaceLost, which callers catch as a SagaError
    with pytest.raises(RaceLost) as caught:
        for attempt in orchestrator.attempts(loaded.saga_id):
            with attempt:
                tries += 1
                raise ConcurrencyError("saga-x", 1, 2)
    assert isinstance(caught.value, SagaError)
    assert tries == MAX_RACES and races_lost.count == MAX_RACES


def test_advance_records_what_decide_says_is_due_now(orchestrator, started, clock):
    # given a trip whose holds a worker claimed, then died
    loaded = orchestrator.commit(started(Published()), [],
                                 claim_ahead=AHEAD).loaded
    # when the saga is advanced after the lease ran out
    clock.advance((LEASE + timedelta(seconds=1)).total_seconds())
    committed = orchestrator.advance(loaded.saga_id)
    # then both expired claims are recorded as outcomes to reconcile
    unknown = [e for e in committed.events if isinstance(e, StepOutcomeUnknown)]
    assert sorted(e.step_id for e in unknown) == ["hold_flight", "hold_hotel"]


def test_sweeping_a_saga_records_an_expired_claim_and_publishes_nothing_itself(
    orchestrator, started, clock
):
    # given a trip whose holds were claimed by a worker that then died
    loaded = orchestrator.commit(started(Published()), [],
                                 claim_ahead=AHEAD).loaded
    # when the sweep comes after the lease ran out
    clock.advance((LEASE + timedelta(seconds=1)).total_seconds())
    swept = sweep_saga(orchestrator, loaded, timedelta(seconds=10))
    # then both expired claims are recorded as outcomes to reconcile, and both lookups
    # (each a message of its own) are the sweep's wake-ups for the caller to publish
    assert swept.committed is not None and swept.republish == ()
    unknown = [e for e in swept.committed.events if isinstance(e, StepOutcomeUnknown)]
    assert sorted(e.step_id for e in unknown) == ["hold_flight", "hold_hotel"]
    assert sorted((c.step_id, c.kind, c.attempt) for c in swept.wake_ups) == [
        ("hold_flight", StepKind.FORWARD, 1), ("hold_hotel", StepKind.FORWARD, 1)]
    assert orchestrator.log.load(loaded.saga_id).version == swept.committed.loaded.version
