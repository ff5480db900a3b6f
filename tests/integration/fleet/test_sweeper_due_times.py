"""The sweeper reads only the sagas that are due, on real PostgreSQL and Redis: parked sagas
are not read, a re-published item waits out a growing window (few copies with no worker),
a commit between the read and the re-timing wins, the full pass repairs a wrong due time,
and the pass's redeliveries are written in one statement."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from fleet_harness import SandboxFleet, build_fleet, track_until
from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from application.orchestrator import utc_now
from events.saga_log.port import DueSaga
from events.saga_log.streams import CorruptSagaStream
from saga_core.contracts import StepKind
from sagafleet.example_sagas.registration import register_trip
from workers.sweeper import Sweeper

FAR = datetime.max.replace(tzinfo=utc_now().tzinfo) - timedelta(days=1)


class Clock:
    """The fleet's clock, moved by the test."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def __call__(self) -> datetime:
        return utc_now() + self.ahead


class CountingLog:
    """The fleet's saga log as the sweeper sees it, noting which sagas it reads.

    ``between`` runs after a read (another writer committing before the sweeper re-times
    what it read); a saga in ``unreadable`` reads as a corrupt stream.
    """

    def __init__(self, log: Any) -> None:
        self._log = log
        self.read: list[str] = []
        self.between: Callable[[], None] | None = None
        self.unreadable: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def load_many(self, saga_ids: Sequence[str]) -> dict[str, Any]:
        self.read.extend(saga_ids)
        found = self._log.load_many(saga_ids)
        if self.between is not None:
            self.between()
        return {saga_id: CorruptSagaStream(f"{saga_id} cannot be read")
                if saga_id in self.unreadable else loaded for saga_id, loaded in found.items()}


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _fleet(database: str, broker: str, clock: Clock, **config: Any) -> SandboxFleet:
    base = build_fleet(database, broker)
    base.close()
    fleet = SandboxFleet(replace(base.config, **config), clock=clock)
    register_trip(fleet)
    return fleet


@pytest.fixture
def due_fleet(database: str, broker: str, clock: Clock) -> Iterator[SandboxFleet]:
    """A fleet whose sweeper never makes a full pass: only due sagas are swept."""
    fleet = _fleet(database, broker, clock, sweep_full_every_s=0, republish_max_s=20)
    yield fleet
    fleet.close()


def _lost(fleet: SandboxFleet, key: str) -> str:
    """A trip whose first step's message no worker takes (no worker runs here)."""
    return str(fleet.client().start("trip", TRIP_INPUT, key=key).saga_id)


def _parked(fleet: SandboxFleet, key: str) -> str:
    """A trip above the capture gate, its holds run: it waits an hour for an approval."""
    saga_id = str(fleet.client().start("trip", {**TRIP_INPUT, "amount": 250_000},
                                       key=key).saga_id)
    for step in ("hold_flight", "hold_hotel"):
        command = StepCommand(saga_id=saga_id, step_id=step, kind=StepKind.FORWARD, attempt=1)
        assert fleet.executor.handle(command).verdict == "executed"
    return saga_id


def _counting(fleet: SandboxFleet) -> CountingLog:
    """Put a counting log between the sweeper and the fleet's log (the orchestrator keeps
    the real one)."""
    assert fleet.orchestrator.log is fleet.repo
    counting = CountingLog(fleet.repo)
    fleet.__dict__["repo"] = counting
    return counting


def _redeliveries(fleet: SandboxFleet) -> list[tuple[str, datetime]]:
    with fleet.store.connection() as conn:
        rows = conn.execute("SELECT saga_id, recorded_at FROM fleet.redeliveries").fetchall()
    return [(row[0], row[1]) for row in rows]


def test_a_pass_reads_only_the_due_sagas(due_fleet: SandboxFleet, clock: Clock) -> None:
    # given three sagas parked for an approval and two whose first message was lost
    parked = [_parked(due_fleet, f"parked-{n}") for n in range(3)]
    lost = [_lost(due_fleet, f"lost-{n}") for n in range(2)]
    log = _counting(due_fleet)
    sweeper = Sweeper(due_fleet)
    # when a pass runs after the queue wait
    clock.ahead = timedelta(seconds=5)
    report = sweeper.sweep()
    # then it read only the two lost sagas, re-published their two holds each, re-timed them
    assert sorted(log.read) == sorted(lost)
    assert (report.active, report.republished, report.deferred) == (2, 4, 2)
    assert report.full_pass_s is None
    # and an hour on, the parked sagas' approvals expire: now they are read
    log.read.clear()
    clock.ahead = timedelta(hours=1, seconds=5)
    sweeper.sweep()
    assert set(parked) <= set(log.read)


def test_with_no_worker_an_overdue_item_is_republished_in_growing_gaps(
    due_fleet: SandboxFleet, clock: Clock
) -> None:
    # given a saga whose first two steps (the parallel holds) no worker will ever take
    # (queue wait 1 s, gaps capped at 20 s)
    saga_id = _lost(due_fleet, "orphan")
    sweeper = Sweeper(due_fleet)
    # when the sweeper passes every simulated second for two minutes
    copies = []
    for second in range(1, 121):
        clock.ahead = timedelta(seconds=second)
        copies.append(sweeper.sweep().republished)
    # then it re-published a handful of copies of each (1, 3, 7, 15 s after the queue
    # wait, then every 20 s), not one per pass, and counted each
    per_hold = [n // 2 for n in copies if n]
    assert [n % 2 for n in copies] == [0] * len(copies), copies
    assert 6 <= sum(per_hold) <= 10, copies
    assert sum(copies[60:]) // 2 <= 4, copies  # the gaps stop growing at the cap
    assert [s for s, _ in _redeliveries(due_fleet)] == [saga_id] * sum(copies)


def test_a_commit_between_the_read_and_the_retiming_wins(
    due_fleet: SandboxFleet, clock: Clock
) -> None:
    # given a saga overdue for its first step, and a worker that runs that step right after
    # the sweeper has read the saga
    saga_id = _lost(due_fleet, "raced")
    log = _counting(due_fleet)
    committed: list[DueSaga] = []

    def worker_commits() -> None:
        log.between = None
        command = StepCommand(saga_id=saga_id, step_id="hold_flight", kind=StepKind.FORWARD,
                              attempt=1)
        assert due_fleet.executor.handle(command).verdict == "executed"
        committed.extend(d for d in log.due(FAR, 100) if d.saga_id == saga_id)

    log.between = worker_commits
    clock.ahead = timedelta(seconds=5)
    # when a pass sweeps it
    report = Sweeper(due_fleet).sweep()
    # then the re-timing at the version read changed nothing: the worker's due time stands
    assert report.republished == 2 and report.deferred == 0
    (after,) = [d for d in log.due(FAR, 100) if d.saga_id == saga_id]
    assert committed == [after]
    assert after.version == log.load(saga_id).version


def test_the_full_pass_repairs_a_wrong_due_time(
    database: str, broker: str, due_fleet: SandboxFleet, clock: Clock
) -> None:
    # given an overdue saga whose due time was lost (cleared: never due)
    saga_id = _lost(due_fleet, "forgotten")
    version = due_fleet.repo.load(saga_id).version
    assert due_fleet.repo.defer([DueSaga(saga_id, version, None)]) == 1
    clock.ahead = timedelta(seconds=5)
    # when only due passes run, it is never seen
    due_only = Sweeper(due_fleet)
    track_until(due_only, 1)  # the full pass reads the tracked sagas
    assert due_only.sweep().republished == 0
    # but a sweeper that makes full passes (at its first pass, then every 10 minutes)
    full = _fleet(database, broker, clock, sweep_full_every_s=600)
    try:
        sweeper = Sweeper(full)
        first = sweeper.sweep()
        # re-publishes it, says how long the full pass took, and re-times it
        assert first.republished == 2 and first.full_pass_s is not None
        assert [d.saga_id for d in full.repo.due(FAR, 100)] == [saga_id]
        # and its next pass reads only what is due
        assert sweeper.sweep().full_pass_s is None
    finally:
        full.close()


def test_a_passs_redeliveries_are_written_in_one_statement(
    due_fleet: SandboxFleet, clock: Clock
) -> None:
    # given six sagas whose first messages (two holds each) were lost
    lost = {_lost(due_fleet, f"batch-{n}") for n in range(6)}
    clock.ahead = timedelta(seconds=5)
    # when one pass re-publishes them all
    assert Sweeper(due_fleet).sweep().republished == 12
    # then their twelve rows were written by one statement: one transaction's now()
    rows = _redeliveries(due_fleet)
    assert {saga_id for saga_id, _ in rows} == lost and len(rows) == 12
    assert len({recorded_at for _, recorded_at in rows}) == 1


def test_an_unreadable_saga_is_put_off_not_read_every_pass(
    due_fleet: SandboxFleet, clock: Clock
) -> None:
    # given a due saga whose stream cannot be read (gaps capped at 20 s)
    saga_id = _lost(due_fleet, "unreadable")
    log = _counting(due_fleet)
    log.unreadable.add(saga_id)
    sweeper = Sweeper(due_fleet)
    # when passes run every simulated second for half a minute
    errors = 0
    for second in range(5, 35):
        clock.ahead = timedelta(seconds=second)
        errors += len(sweeper.sweep().errors)
    # then it was read and reported twice: put off by the longest gap each time
    assert errors == 2 and log.read.count(saga_id) == 2


# -- a backlog is worked off over budgeted passes (issue 35) ----------------------------------


def test_a_budgeted_pass_works_off_a_backlog_a_chunk_at_a_time_each_saga_once(
    due_fleet: SandboxFleet, clock: Clock
) -> None:
    # given five sagas whose first messages were lost (a broker loss), and a sweeper that
    # reads two sagas at a time
    lost = [_lost(due_fleet, f"backlog-{n}") for n in range(5)]
    log = _counting(due_fleet)
    sweeper = Sweeper(due_fleet, chunk=2)
    clock.ahead = timedelta(seconds=5)
    # when passes run with no time to spare (each still sweeps one chunk of its backlog)
    reports = [sweeper.sweep(budget_s=0) for _ in range(3)]
    # then the backlog went two, two, one, said so, and each saga was swept once
    assert [r.active for r in reports] == [2, 2, 1]
    assert [r.backlog for r in reports] == [True, True, False]
    assert sorted(log.read) == sorted(lost)
    # re-publishing each saga's two holds once, as one whole pass would
    assert sum(r.republished for r in reports) == 10
    assert sweeper.sweep(budget_s=0).active == 0


def test_what_comes_due_behind_a_backlog_is_swept_at_the_next_pass(
    due_fleet: SandboxFleet, clock: Clock
) -> None:
    # given a backlog of five overdue sagas, and a budgeted pass that swept two of them
    backlog = [_lost(due_fleet, f"old-{n}") for n in range(5)]
    log = _counting(due_fleet)
    sweeper = Sweeper(due_fleet, chunk=2)
    clock.ahead = timedelta(seconds=5)
    assert sweeper.sweep(budget_s=0).backlog
    # when a saga started after that pass comes due (a fresh duty: its first step waits
    # past the queue wait) and the next pass runs
    clock.ahead = timedelta(seconds=10)
    fresh = _lost(due_fleet, "fresh")
    clock.ahead = timedelta(seconds=15)
    log.read.clear()
    report = sweeper.sweep(budget_s=0)
    # then that pass swept it, although older sagas of the backlog are still waiting
    assert fresh in log.read
    assert report.backlog and set(backlog) - set(log.read)


def test_a_budgeted_full_pass_goes_on_where_the_last_pass_stopped(
    database: str, broker: str, clock: Clock
) -> None:
    # given three overdue sagas and a sweeper whose first pass is a full pass, two at a time
    fleet = _fleet(database, broker, clock, sweep_full_every_s=600, republish_max_s=20)
    try:
        lost = {_lost(fleet, f"full-{n}") for n in range(3)}
        sweeper = Sweeper(fleet, chunk=2)
        track_until(sweeper, 3)
        clock.ahead = timedelta(seconds=5)
        # when budgeted passes run with no time to spare
        first, second = sweeper.sweep(budget_s=0), sweeper.sweep(budget_s=0)
        # then the full pass took two of them, then the third, and ended (timed) there
        assert (first.active, first.backlog, first.full_pass_s) == (2, True, None)
        assert (second.active, second.backlog) == (1, False)
        assert second.full_pass_s is not None
        assert first.republished + second.republished == 2 * len(lost)
        # and the pass after it reads only what is due
        assert sweeper.sweep(budget_s=0).full_pass_s is None
    finally:
        fleet.close()
