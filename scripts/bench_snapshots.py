"""Benchmark loads of long sagas with and without snapshots of saga state.

Writes trip sagas of 10, 1,000 and 10,000 events (a start, then rounds of a transient
failure and its retry, a timeout and its reconciliations, an approval asked and granted)
into the log of a fresh database, then times ``PostgresSagaLog.load`` of each, many times,
in alternating rounds:

* ``snapshots``: the log as a worker runs it (``snapshot_every`` = N, the default): the
  saga's snapshot lags its head by N/2 events (the average a load sees when a snapshot is
  written every N events);
* ``whole log``: ``snapshot_every`` = 0, every load folds every event (the old path).

It prints the median of each, the growth ratio load(10k)/load(10) with snapshots (target
<= 1.3), the same ratio without, what snapshots cost a short saga that has none (the common
path: the snapshot query instead of the plain read; loads on and off taken in turn), and,
for choosing N, the median cost of one snapshot write W and of folding one event c, with
the N that minimises W/N + c*N/2 (one write per N events against N/2 folded per load).

Usage: python scripts/bench_snapshots.py [--loads N] [--whole-loads N] [--rounds N] [--url URL]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/integration/projections"))
from bench_databases import drop_database, new_database, postgres_server  # noqa: E402
from projection_support import TripScript  # noqa: E402

from events.definition_store.postgres import DefinitionStore  # noqa: E402
from events.eventstore.model import NO_STREAM  # noqa: E402
from events.eventstore.postgres import EventStore  # noqa: E402
from events.saga_log.postgres import PostgresSagaLog  # noqa: E402
from events.saga_log.streams import saga_registry, saga_stream
from saga_core import (  # noqa: E402
    ApprovalGranted,
    ApprovalRequested,
    ErrorClass,
    Evidence,
    ReconciliationResult,
    ReconciliationScheduled,
    SagaEvent,
    StepFailed,
    StepKind,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
)
from saga_core.engine.state_codec import DEFAULT_SNAPSHOT_EVERY, SCHEMA  # noqa: E402
from sagafleet.migrate import migrate_all  # noqa: E402

SIZES = (10, 1_000, 10_000)
F = StepKind.FORWARD


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server, migrated."""
    url = new_database(server_url, "bench_snap")
    migrate_all(url)
    return url


def rounds_of_trouble(script: TripScript) -> Iterator[SagaEvent]:
    """Endless rounds of what makes a saga long: a retried transient failure, a timeout
    reconciled (twice unknown), an approval asked and granted."""
    flight, key = "hold_flight", script.key("hold_flight")
    evidence = Evidence(intended_action="capture", affected_resource="card", reason="policy",
                        expected_result="paid", residual_risk="none",
                        deadline=script.t + timedelta(days=1))
    attempt = 0
    while True:
        attempt += 1
        at = script._at()
        lease = at + timedelta(seconds=30)
        yield from (
            StepScheduled(at=at, step_id=flight, kind=F, attempt=attempt, not_before=at,
                          reason="retry"),
            StepStarted(at=at, step_id=flight, kind=F, attempt=attempt, operation_key=key,
                        request_hash="h", worker_id="w1", lease_expires_at=lease),
            StepFailed(at=at, step_id=flight, kind=F, attempt=attempt, operation_key=key,
                       error_class=ErrorClass.TRANSIENT, message="503 from the provider"),
        )
        attempt += 1
        yield from (
            StepScheduled(at=at, step_id=flight, kind=F, attempt=attempt, not_before=at,
                          reason="retry"),
            StepStarted(at=at, step_id=flight, kind=F, attempt=attempt, operation_key=key,
                        request_hash="h", worker_id="w2", lease_expires_at=lease),
            StepOutcomeUnknown(at=at, step_id=flight, kind=F, attempt=attempt,
                               operation_key=key, reason="timeout"),
        )
        for _ in range(2):
            yield ReconciliationScheduled(at=at, step_id=flight, kind=F, attempt=attempt,
                                          not_before=at + timedelta(seconds=5), reason="lookup")
            yield ReconciliationResult(at=at, step_id=flight, kind=F, attempt=attempt,
                                       operation_key=key, result="unknown")
        action = f"capture-{attempt}"
        yield ApprovalRequested(at=at, step_id="capture_payment", kind=F, action_hash=action,
                                scope="trip", evidence=evidence, expires_at=at + timedelta(1))
        yield ApprovalGranted(at=at, step_id="capture_payment", kind=F, action_hash=action,
                              approver="bob", expires_at=at + timedelta(hours=1))


def history(size: int) -> tuple[str, list[SagaEvent]]:
    """A saga id and ``size`` events of its history."""
    script = TripScript(tenant="t").start()
    trouble = rounds_of_trouble(script)
    return script.saga_id, [*script.events, *(next(trouble) for _ in range(size - 1))]


def write(log: PostgresSagaLog, saga_id: str, events: list[SagaEvent], version: int) -> None:
    """Append ``events`` after ``version``, in appends of at most 500."""
    for start in range(0, len(events), 500):
        chunk = events[start:start + 500]
        log.append(saga_id, "t", chunk, version + start if version + start else NO_STREAM)


def timed(action: Callable[[], object], times: int) -> list[float]:
    """Seconds each of ``times`` calls of ``action`` took."""
    took = []
    for _ in range(times):
        began = time.perf_counter()
        action()
        took.append(time.perf_counter() - began)
    return took


def interleaved(log: PostgresSagaLog, sagas: dict[int, str], loads: int) -> dict[int, list[float]]:
    """Seconds of ``loads`` loads of each saga, the sizes taken in turn load by load (on a
    busy machine, a block of loads of one size would measure the load of the moment)."""
    took: dict[int, list[float]] = {size: [] for size in sagas}
    for _ in range(loads):
        for size, saga_id in sagas.items():
            took[size] += timed(lambda s=saga_id: log.load(s), 1)
    return took


def common_path(
    on: PostgresSagaLog, off: PostgresSagaLog, saga_id: str, loads: int
) -> tuple[float, float]:
    """Median seconds of a load of a short saga with snapshots on and off, in turn: what
    snapshots cost the common path (the snapshot query instead of the plain read)."""
    took: tuple[list[float], list[float]] = ([], [])
    for _ in range(loads):
        took[0].extend(timed(lambda: on.load(saga_id), 1))
        took[1].extend(timed(lambda: off.load(saga_id), 1))
    return statistics.median(took[0]), statistics.median(took[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=50,
                        help="loads per round and saga, with snapshots")
    parser.add_argument("--whole-loads", type=int, default=5,
                        help="loads per round and saga, without (10k events: seconds each)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--url", default=None, help="a PostgreSQL server (default: embedded)")
    args = parser.parse_args()
    with postgres_server(args.url) as server:
        return _measure(server, args)


def _measure(server: str, args: argparse.Namespace) -> int:
    """Measure on a database of its own on ``server``, and report."""
    every = DEFAULT_SNAPSHOT_EVERY
    database = fresh_database(server)
    try:
        with EventStore.connect(database, pool_size=2, registry=saga_registry()) as store:
            definitions = DefinitionStore(store)
            with_snapshots = PostgresSagaLog(store, definitions, snapshot_every=every)
            whole_log = PostgresSagaLog(store, definitions, snapshot_every=0)
            sagas: dict[int, str] = {}
            for size in SIZES:
                saga_id, events = history(size)
                definitions.register_shared(TripScript().definition, registered_by="bench")
                # the snapshot lags the head by N/2 events: written, then N/2 more appended
                lag = every // 2 if size > every else 0
                write(with_snapshots, saga_id, events[:size - lag], 0)
                with_snapshots.load(saga_id)  # writes the snapshot (if it folded > N)
                write(with_snapshots, saga_id, events[size - lag:], size - lag)
                assert with_snapshots.load(saga_id).state == whole_log.load(saga_id).state
                sagas[size] = saga_id
            medians: dict[tuple[str, int], list[float]] = {}
            for _ in range(args.rounds):
                for name, log, loads in (("snapshots", with_snapshots, args.loads),
                                         ("whole log", whole_log, args.whole_loads)):
                    for size, took in interleaved(log, sagas, loads).items():
                        medians.setdefault((name, size), []).append(statistics.median(took))
            result = {key: statistics.median(values) for key, values in medians.items()}
            short = common_path(with_snapshots, whole_log, sagas[10], args.loads * args.rounds)
            big = with_snapshots.load(sagas[10_000])
            head = with_snapshots.streams.read_stream(saga_stream(sagas[10_000]))[-1]
            snapshot = with_snapshots.codec.snapshot_of(big, head)
            assert snapshot is not None
            write_s = statistics.median(timed(
                lambda: with_snapshots.snapshots.save_snapshot(snapshot, SCHEMA), args.loads))
            encode_s = statistics.median(timed(
                lambda: with_snapshots.codec.snapshot_of(big, head), args.loads))
    finally:
        drop_database(server, database)
    report(result, every, encode_s, write_s)
    print(f"short saga (10 events, no snapshot), on / off taken in turn: {short[0] * 1e3:.3f} / "
          f"{short[1] * 1e3:.3f} ms = {short[0] / short[1]:.2f}x")
    return 0


def report(
    result: dict[tuple[str, int], float], every: int, encode_s: float, upsert_s: float
) -> None:
    """Print the medians, the growth ratios and the cost model for N."""
    for name in ("snapshots", "whole log"):
        line = "  ".join(f"{size:>6} events {result[name, size] * 1e3:8.3f} ms" for size in SIZES)
        print(f"load, {name:<9} (median): {line}")
    growth = result["snapshots", 10_000] / result["snapshots", 10]
    print(f"growth load(10k)/load(10) with snapshots (N={every}): {growth:.2f}x (target <= 1.3)")
    print(f"growth load(10k)/load(10) whole log:          "
          f"{result['whole log', 10_000] / result['whole log', 10]:.2f}x")
    per_event = (result["whole log", 10_000] - result["whole log", 1_000]) / 9_000
    write_s = encode_s + upsert_s
    best = math.sqrt(2 * write_s / per_event)
    print(f"one snapshot write W = {write_s * 1e3:.3f} ms (encode {encode_s * 1e3:.3f}, upsert "
          f"{upsert_s * 1e3:.3f}); reading and folding one event c = {per_event * 1e6:.1f} us; "
          f"N minimising W/N + c*N/2 = {best:.0f}")


if __name__ == "__main__":
    sys.exit(main())
