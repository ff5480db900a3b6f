"""Benchmark: a sweeper pass costs what is due, not what is parked; with no consumer the
broker gets a bounded, flat number of copies.

Part 1, pass cost against parked sagas: N parked sagas (trips waiting an hour for an
approval) for each N of ``--sizes`` (1k, 10k, 100k), plus ``--due`` sagas that are due
(their first steps' messages lost: overdue schedules). At each N, the median of
``--passes`` passes (the due sagas made due again before each, untimed) and the ratio
pass(largest N)/pass(smallest N), same run; then one full pass (every active saga read and
re-timed: at a sweeper's start, then every SAGAFLEET_SWEEP_FULL_EVERY_S, default 600 s).

Part 2, no consumer: ``--orphans`` sagas, all overdue (their overdue times spread over the
last hour), a real Redis, nobody consuming; ten passes 2 s apart on the sweeper's clock
(its default interval). Per pass: messages added to the steps queue (drained and counted by
LLEN as they come, so the queue stays small) and rows written (redeliveries + deferrals).
The sweeper before the due-time index re-published every overdue item on every pass, one
INSERT each: pass 1's figures, repeated every pass.

Sagas are written fast, not through the fleet: the events of templates made by the test kit
(``sagafleet.testing``), copied under new ids and appended by several threads, each append
a pipelined transaction of many sagas, each saga with its template's next due time.

    python scripts/bench_sweeper.py --url postgresql://postgres@127.0.0.1:5432/test \\
        --broker redis://127.0.0.1:6379/11
    python scripts/bench_sweeper.py --sizes 1000 5000 --orphans 2000 --passes 3   # quick

Without ``--url`` / ``--broker`` it starts the embedded servers.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from bench_databases import drop_database, new_database

from application.orchestrator import Clock, utc_now
from events.eventstore.model import NO_STREAM, NewEvent
from events.saga_log.port import DueSaga
from events.saga_log.streams import saga_stream
from saga_core import evolve
from saga_core.engine.due import next_due
from saga_core.engine.events import SagaEvent, StepScheduled
from saga_core.engine.state import SagaState
from sagafleet import embedded
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from sagafleet.example_sagas.registration import register_trip
from sagafleet.migrate import migrate_all
from sagafleet.testing import TestClock, TestFleet
from workers.celery_app import QUEUE_STEPS, broker_redis
from workers.fleet import Fleet, FleetConfig
from workers.sweeper import Sweeper, SweepReport

TRIP = {
    "customer_email": "bench@example.com", "flight_id": "FL1", "hotel_id": "HT1", "nights": 1,
    "amount": 10_000, "currency": "EUR", "card_token": "tok_bench_4242",
}
GATED = {**TRIP, "amount": 250_000}  # above the capture gate: waits for an approval
QUEUE_WAIT = timedelta(seconds=10)  # the default SAGAFLEET_QUEUE_WAIT_SECONDS
REPUBLISH_MAX_S = 300.0  # the default SAGAFLEET_REPUBLISH_MAX_S
WRITE_BATCH = 500  # sagas per pipelined transaction
PASS_GAP = timedelta(seconds=2)  # the default SAGAFLEET_SWEEP_INTERVAL_SECONDS


@dataclass(frozen=True)
class Template:
    """A saga's events as the test kit recorded them, and its next due time then."""

    events: tuple[SagaEvent, ...]
    due_at: datetime | None


class Copier:
    """A template's envelopes, encoded once (the saga log's codec: tenant metadata), and
    copied under a new saga id (only SagaStarted names it)."""

    def __init__(self, fleet: Fleet, made: Template) -> None:
        self.envelopes = fleet.repo.codec.new_events(made.events, "default", None)
        self.due_at = made.due_at

    def copy_for(self, saga_id: str) -> list[NewEvent]:
        started, *rest = self.envelopes
        return [replace(started, data={**started.data, "saga_id": saga_id}), *rest]


def template(at: datetime, trip: dict[str, object], *, run: bool) -> Template:
    """A trip started at ``at`` on the in-memory test kit (its steps run when ``run``)."""
    kit = TestFleet(clock=TestClock(at))
    saga_id = kit.client().start("trip", trip, key="template").saga_id
    if run:
        kit.run_until_idle()
    history = kit.log.load_history(saga_id)
    return Template(history.events, next_due(history.state, QUEUE_WAIT, after=at))


def write_sagas(fleet: Fleet, ids: Sequence[str], template_of: Callable[[int], Template],
                threads: int) -> None:
    """Append each saga's copied events with its due time, ``WRITE_BATCH`` sagas to a
    pipelined transaction, on ``threads`` threads."""
    copiers: dict[int, Copier] = {}

    def copier(made: Template) -> Copier:
        return copiers.setdefault(id(made), Copier(fleet, made))

    def write(start: int) -> None:
        with fleet.store.transaction(pipelined=True) as unit:
            for n in range(start, min(start + WRITE_BATCH, len(ids))):
                made = copier(template_of(n))
                unit.append(saga_stream(ids[n]), made.copy_for(ids[n]), NO_STREAM,
                            due_at=made.due_at)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(0, len(ids), WRITE_BATCH)))


def new_ids(count: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(count)]


def catch_up(sweeper: Sweeper, fleet: Fleet, expected: int, timeout: float = 1800) -> None:
    """Let the tracker fold every SagaStarted (untimed: a pass tracks only what is new)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sweeper.track(limit=5000)
        with fleet.store.connection() as conn:
            row = conn.execute("SELECT count(*) FROM fleet.active_sagas").fetchone()
        if row is not None and row[0] >= expected:
            return
        time.sleep(0.2)
    raise SystemExit(f"the tracker did not catch up with {expected} sagas")


def analyze(fleet: Fleet) -> None:
    """Give the planner statistics of the bulk-written tables, as autovacuum soon would on a
    running system (without them it may scan every saga's events to read a hundred)."""
    with fleet.store.connection() as conn:
        conn.execute("ANALYZE eventstore.events, eventstore.streams, fleet.active_sagas")


def fresh_database(server_url: str) -> str:
    """A new migrated database on the server; its URL."""
    url = new_database(server_url, "bench_sweeper")
    migrate_all(url)
    return url


class ShiftedClock:
    """The sweeper's clock: real time plus what the benchmark moved it by."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def __call__(self) -> datetime:
        return utc_now() + self.ahead


class SteppedClock:
    """A sweeper's clock that stands still at ``start`` plus what the benchmark moved it by:
    passes exactly ``PASS_GAP`` apart however long each took (with real time, a pass that
    took two minutes would put the next one two minutes later, and count the windows that
    ended meanwhile)."""

    def __init__(self, start: datetime) -> None:
        self.start, self.ahead = start, timedelta(0)

    def __call__(self) -> datetime:
        return self.start + self.ahead


def open_fleet(database: str, broker: str, clock: Clock, *, full_every_s: float,
               threads: int) -> Fleet:
    config = FleetConfig(database_url=database, broker_url=broker,
                         queue_wait_s=QUEUE_WAIT.total_seconds(), republish_max_s=REPUBLISH_MAX_S,
                         sweep_full_every_s=full_every_s, pool_size=threads + 2)
    fleet = Fleet(config, trip_tool_catalogue(), clock=clock)
    register_trip(fleet)
    return fleet


def timed(sweeper: Sweeper) -> tuple[float, SweepReport]:
    started = time.perf_counter()
    report = sweeper.sweep()
    return time.perf_counter() - started, report


def timed_cpu(sweeper: Sweeper) -> tuple[float, float, SweepReport]:
    """A whole pass's wall seconds, this process's CPU seconds in it, and its report."""
    cpu = time.process_time()
    seconds, report = timed(sweeper)
    return seconds, time.process_time() - cpu, report


def explain_due(fleet: Fleet) -> str:
    from events.eventstore.postgres import _DUE_STREAMS

    with fleet.store.connection() as conn:
        rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + _DUE_STREAMS,
                            (fleet.clock(), "saga-", 500)).fetchall()
    return "\n".join("    " + row[0] for row in rows)


@dataclass
class Bench:
    """One database of the pass-cost part: its fleet, sweeper and due sagas."""

    parked: int
    database: str
    fleet: Fleet
    sweeper: Sweeper
    due: list[DueSaga]
    samples: list[float]


def parked_template(at: datetime) -> Template:
    """A trip whose first steps wait an hour (as a long retry backoff would make them): its
    next due time is far. (A copied approval request would not do: its action hash names
    the saga it was asked for.)"""
    made = template(at, TRIP, run=False)
    events = tuple(
        event.model_copy(update={"not_before": at + timedelta(hours=1)})
        if isinstance(event, StepScheduled) else event
        for event in made.events
    )
    state = SagaState.initial(trip_definition())
    for event in events:
        state = evolve(state, event)
    return Template(events, next_due(state, QUEUE_WAIT, after=at))


def open_bench(server: str, broker: str, clock: ShiftedClock, parked: int, due: int,
               threads: int, templates: tuple[Template, Template]) -> Bench:
    started = time.perf_counter()
    database = fresh_database(server)
    fleet = open_fleet(database, broker, clock, full_every_s=0, threads=threads)
    far, lost = templates
    due_ids = new_ids(due)
    write_sagas(fleet, due_ids, lambda n: lost, threads)
    write_sagas(fleet, new_ids(parked), lambda n: far, threads)
    written = time.perf_counter() - started
    sweeper = Sweeper(fleet)
    catch_up(sweeper, fleet, parked + due)
    analyze(fleet)
    print(f"N={parked:>7}: {parked} parked + {due} due sagas written in {written:.1f} s,"
          f" tracked in {time.perf_counter() - started - written:.1f} s")
    return Bench(parked, database, fleet, sweeper,
                 [DueSaga(i, len(lost.events), lost.due_at) for i in due_ids], [])


def pass_cost(server: str, broker: str, sizes: list[int], due: int, passes: int,
              threads: int, full_at: int) -> None:
    """Part 1: median pass time at each number of parked sagas (one database each, their
    passes interleaved so that a noisy neighbour slows all alike), and the full pass."""
    clock = ShiftedClock()
    now = utc_now()
    templates = (parked_template(now), template(now - timedelta(minutes=5), TRIP, run=False))
    assert templates[0].due_at is not None and templates[0].due_at > now + timedelta(minutes=30)
    benches = [open_bench(server, broker, clock, size, due, threads, templates)
               for size in sizes]
    redis = broker_redis(broker)
    try:
        for _ in range(passes):
            for bench in benches:
                bench.fleet.repo.defer(bench.due)  # due again (untimed)
                seconds, report = timed(bench.sweeper)
                assert report.active == due and not report.errors, report
                bench.samples.append(seconds)
            redis.delete(QUEUE_STEPS)
        medians = {}
        for bench in benches:
            medians[bench.parked] = median = statistics.median(bench.samples)
            print(f"N={bench.parked:>7} parked + {due} due: pass median {median * 1000:.1f} ms"
                  f" over {passes} (min {min(bench.samples) * 1000:.1f}, max"
                  f" {max(bench.samples) * 1000:.1f}); each pass reads the {due} due sagas"
                  f" and re-publishes their {2 * due} holds")
        small, large = sizes[0], sizes[-1]
        print(f"ratio pass({large})/pass({small}) = {medians[large] / medians[small]:.2f}"
              " (target <= 1.3)")
        print(f"the due read at N={large} (EXPLAIN ANALYZE):")
        print(explain_due(benches[-1].fleet))
        for bench in benches:
            if bench.parked != full_at:
                continue
            bench.fleet.repo.defer(bench.due)
            full = open_fleet(bench.database, broker, clock, full_every_s=600, threads=threads)
            try:
                seconds, report = timed(Sweeper(full))
            finally:
                full.close()
            print(f"full pass over {report.active} active sagas (N={full_at}): {seconds:.1f} s,"
                  f" {seconds / report.active * 1000:.2f} ms a saga (re-timed"
                  f" {report.deferred}); it runs at a sweeper's start and every"
                  " SAGAFLEET_SWEEP_FULL_EVERY_S (default 600 s); the sweeper before the"
                  " index made one every pass (default every 2 s)")
        redis.delete(QUEUE_STEPS)
    finally:
        for bench in benches:
            bench.fleet.close()
            drop_database(server, bench.database)


class QueueDrain:
    """Counts the messages added to the steps queue, taking them off as they come (LLEN and
    DEL in one transaction, every 0.2 s), so that no consumer does not mean a full Redis."""

    def __init__(self, broker: str) -> None:
        self.redis = broker_redis(broker)
        self.redis.delete(QUEUE_STEPS)
        self.added = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def drain(self) -> int:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.llen(QUEUE_STEPS)
            pipe.delete(QUEUE_STEPS)
            count, _ = pipe.execute()
        self.added += int(count)
        return self.added

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.drain()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.drain()


@dataclass
class Orphans:
    """Part 2's setting: every saga overdue, its messages lost, nobody consuming."""

    database: str
    fleet: Fleet  # on the stepped clock
    clock: SteppedClock
    sweeper: Sweeper  # this fleet's, helpers none
    drain: QueueDrain


@contextlib.contextmanager
def orphans_written(server: str, broker: str, orphans: int, threads: int) -> Iterator[Orphans]:
    """``orphans`` overdue trips (2 lost holds each) in a fresh database, tracked; a drain
    counting the steps queue; the database dropped at the end."""
    database = fresh_database(server)
    now = utc_now()
    clock = SteppedClock(now)
    fleet = open_fleet(database, broker, clock, full_every_s=0, threads=threads)
    try:
        # Overdue since anywhere in the last hour: one template every 10 s.
        spread = [template(now - timedelta(seconds=3600 - 10 * k), TRIP, run=False)
                  for k in range(360)]
        started = time.perf_counter()
        write_sagas(fleet, new_ids(orphans), lambda n: spread[n % len(spread)], threads)
        sweeper = Sweeper(fleet)
        catch_up(sweeper, fleet, orphans)
        analyze(fleet)
        print(f"{orphans} overdue sagas (2 lost holds each) written and tracked in"
              f" {time.perf_counter() - started:.1f} s")
        drain = QueueDrain(broker)
        try:
            yield Orphans(database, fleet, clock, sweeper, drain)
        finally:
            drain.stop()
    finally:
        fleet.close()
        drop_database(server, database)


def no_consumer(server: str, broker: str, orphans: int, threads: int, passes: int = 10) -> None:
    """Part 2: every saga overdue, nobody consuming: copies and rows per pass."""
    with orphans_written(server, broker, orphans, threads) as written:
        print(f"{passes} passes {PASS_GAP.total_seconds():.0f} s apart on the sweeper's clock")
        drain, rows_before = written.drain, redeliveries(written.fleet)
        for n in range(1, passes + 1):
            written.clock.ahead = PASS_GAP * (n - 1)
            before = drain.drain()
            seconds, cpu, report = timed_cpu(written.sweeper)
            added = drain.drain() - before
            rows = redeliveries(written.fleet)
            print(f"pass {n:>2}: {seconds:6.1f} s ({cpu:5.1f} s CPU here),"
                  f" read {report.active:>6}, steps queue"
                  f" +{added:>6} messages, rows {rows - rows_before + report.deferred:>6}"
                  f" ({rows - rows_before} redeliveries + {report.deferred} deferrals)")
            rows_before = rows


def no_consumer_helped(server: str, broker: str, orphans: int, threads: int,
                       helpers: int) -> None:
    """Part 2's first pass by a sweeper with ``helpers`` processes (they run on the
    machine's clock: the later passes, which need this script's stepped clock, are not
    run)."""
    with orphans_written(server, broker, orphans, threads) as written:
        helped_pass(written.database, broker, threads, helpers, written.drain)


def helped_pass(database: str, broker: str, threads: int, helpers: int,
                drain: QueueDrain) -> None:
    """The first pass by a sweeper with ``helpers`` processes (started within the pass, as
    a sweeper's first backlog starts them), on the machine's clock."""
    fleet = open_fleet(database, broker, utc_now, full_every_s=0, threads=threads)
    sweeper = Sweeper(fleet, helpers=helpers)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        before = drain.drain()
        seconds, cpu, report = timed_cpu(sweeper)
        added = drain.drain() - before
    finally:
        sweeper.close()  # the helpers exit: their CPU is counted as this process's children's
        fleet.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    helped = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    print(f"pass  1: {seconds:6.1f} s ({cpu:5.1f} s CPU here, {helped:5.1f} s in {helpers}"
          f" helper processes, their start included), read {report.active:>6}, steps queue"
          f" +{added:>6} messages, deferrals {report.deferred}, errors {len(report.errors)}")


def redeliveries(fleet: Fleet) -> int:
    with fleet.store.connection() as conn:
        row = conn.execute("SELECT count(*) FROM fleet.redeliveries").fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="PostgreSQL server (default: embedded)")
    parser.add_argument("--broker", help="Redis broker URL (default: embedded)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--due", type=int, default=100)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--full-at", type=int, default=10_000,
                        help="the N whose full pass is timed (0: none)")
    parser.add_argument("--orphans", type=int, default=100_000,
                        help="overdue sagas for the no-consumer part (0: skip it)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--helpers", type=int, default=0,
                        help="sweeper helper processes for the no-consumer part's first pass"
                             " (then only that pass runs)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="sfs-", dir="/tmp"))
    server = args.url or embedded.start_postgres(home).url
    broker = args.broker or embedded.start_redis(home).url
    try:
        pass_cost(server, broker, sorted(args.sizes), args.due, args.passes, args.threads,
                  args.full_at)
        if args.orphans:
            if args.helpers:
                no_consumer_helped(server, broker, args.orphans, args.threads, args.helpers)
            else:
                no_consumer(server, broker, args.orphans, args.threads)
    finally:
        if not (args.url and args.broker):
            embedded.stop_embedded(home)
    shutil.rmtree(home, ignore_errors=True)  # measured: its servers' files go


if __name__ == "__main__":
    main()
