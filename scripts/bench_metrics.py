"""Benchmark a Prometheus scrape of the projector as history grows, and a no-op span.

Writes completed trip sagas (14 events each, two hours old) straight into the log of a
fresh database, plus 50 recent ones, projects them, then at each size step times, in
alternating rounds of the same run:

* the exporter's scrape (``projections.prometheus.scrape``: the last 15 minutes, indexed);
* the whole-history collection the exporter used to run per scrape
  (``projections.metrics.collect_platform_metrics``, still what ``sagafleet stats`` shows);

and prints their medians and ratio: the scrape should stay flat while history grows.
Then it times ``application.telemetry.tracing.operation_span`` with no tracer provider configured
(the
cost a step pays when tracing is off) against an empty ``with`` block.

Usage: python scripts/bench_metrics.py [--quick] [--sizes N ...] [--rounds N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench_databases import drop_database, new_database, postgres_server

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests/integration/projections"), str(ROOT / "tests")]
from projection_support import TripScript  # noqa: E402
from read_model_support import project_all  # noqa: E402

from application.telemetry import tracing  # noqa: E402
from application.telemetry.tracing import operation_span  # noqa: E402
from events.definition_store.postgres import DefinitionStore  # noqa: E402
from events.saga_log.postgres import PostgresSagaLog  # noqa: E402
from projections import ProjectionContext  # noqa: E402
from projections.metrics import collect_platform_metrics  # noqa: E402
from projections.prometheus import scrape  # noqa: E402
from projections.window import collect_window  # noqa: E402
from sagafleet.example_sagas import trip_definition  # noqa: E402
from sagafleet.migrate import migrate_all  # noqa: E402


def fresh_database(server_url: str) -> str:
    return new_database(server_url, "bench_metrics")


def write_sagas(repo: PostgresSagaLog, count: int, minutes_ago: float) -> None:
    for _ in range(count):
        script = TripScript()
        script.t = datetime.now(UTC) - timedelta(minutes=minutes_ago)
        script.completed().write(repo)


def median_s(work: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def bench_scrapes(database: str, sizes: list[int], rounds: int) -> None:
    migrate_all(database)
    with ProjectionContext.connect(database) as ctx:
        ctx.definitions.register_shared(trip_definition())
        repo = PostgresSagaLog(ctx.store, DefinitionStore(ctx.store))
        write_sagas(repo, 50, minutes_ago=5)
        written = 0
        print(f"{'old sagas':>10} {'scrape ms':>10} {'window queries ms':>18}"
              f" {'whole history ms':>17} {'history/scrape':>15}")
        for size in sizes:
            write_sagas(repo, size - written, minutes_ago=120)
            written = size
            project_all(ctx)
            with ctx.connection() as conn:  # the statistics autovacuum keeps in a steady state
                conn.execute("ANALYZE")
            scrape(ctx)  # warm the pool and caches for both
            collect_platform_metrics(ctx)
            scraped, windowed, whole = [], [], []
            for _ in range(rounds):  # alternate, so all see the same machine load
                scraped.append(median_s(lambda: scrape(ctx), 1))
                windowed.append(median_s(lambda: collect_window(ctx, 900), 1))
                whole.append(median_s(lambda: collect_platform_metrics(ctx), 1))
            s, w, h = (statistics.median(t) * 1000 for t in (scraped, windowed, whole))
            print(f"{size:>10} {s:>10.2f} {w:>18.2f} {h:>17.2f} {h / s:>14.1f}x", flush=True)


def bench_span(calls: int) -> None:
    def spans() -> None:
        for _ in range(calls):
            with operation_span("saga.step", saga_id="s", step_id="a", tool="t", attempt=1):
                pass

    def bare() -> None:
        for _ in range(calls):
            with contextlib.nullcontext():
                pass

    rounds = 7
    bare_ns = median_s(bare, rounds) / calls * 1e9
    span_ns = median_s(spans, rounds) / calls * 1e9
    api, tracing._trace = tracing._trace, None  # as if the otel extra were not installed
    try:
        absent_ns = median_s(spans, rounds) / calls * 1e9
    finally:
        tracing._trace = api
    print(f"empty with-block: {bare_ns:.0f} ns/call; operation_span with the extra absent: "
          f"{absent_ns:.0f} ns ({absent_ns / bare_ns:.1f}x); installed but off: "
          f"{span_ns:.0f} ns ({span_ns / bare_ns:.1f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 500 .. 2000")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="numbers of old sagas to measure at (default 1000 5000 20000)")
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL server to create the database on (default: embedded)")
    args = parser.parse_args()
    sizes = args.sizes or ([500, 1000, 2000] if args.quick else [1000, 5000, 20000])
    with postgres_server(args.database_url) as server:
        database = fresh_database(server)
        try:
            bench_scrapes(database, sizes, args.rounds)
        finally:
            drop_database(server, database)
    bench_span(100_000)


if __name__ == "__main__":
    main()
