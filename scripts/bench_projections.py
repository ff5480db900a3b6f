"""Benchmark the projections: rebuild speed vs a raw SELECT, and projector memory over size.

Writes completed trip sagas (14 events each) straight into the log of a fresh database, then:

* rebuild speed: events/s of ``projections.rebuild`` against a raw ``SELECT`` of the same
  rows (same columns, same order, fetched into Python) in the same run; rounds alternate
  and medians are printed with their ratio (target >= 0.5x);
* projector memory: a fresh runner projects the whole log; RSS is sampled at every size
  step (100k .. 1M events, or 10k .. 100k with ``--quick``).

Usage: python scripts/bench_projections.py [--quick] [--rounds N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from bench_databases import drop_database, new_database, postgres_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/integration/projections"))
from projection_support import TripScript  # noqa: E402

from events.definition_store.postgres import DefinitionStore  # noqa: E402
from events.saga_log.postgres import PostgresSagaLog  # noqa: E402
from projections import ProjectionContext, ProjectionRunner, rebuild  # noqa: E402
from sagafleet.example_sagas import trip_definition  # noqa: E402
from sagafleet.migrate import migrate_all  # noqa: E402

RAW = (
    "SELECT stream_id, stream_version, event_id, event_type, schema_version, data, metadata,"
    " recorded_at, transaction_id::text, global_position, event_hash, prev_hash, tenant_id"
    " FROM eventstore.events ORDER BY transaction_id, global_position"
)


def rss_mb() -> float:
    """Resident set size of this process, in MiB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


def fresh_database(server_url: str) -> str:
    return new_database(server_url, "bench_proj")


def write_sagas(ctx: ProjectionContext, sagas: int, threads: int = 8) -> int:
    repo = PostgresSagaLog(ctx.store, DefinitionStore(ctx.store))

    def one(_: int) -> int:
        script = TripScript().completed()
        script.write(repo)
        return len(script.events)

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(one, range(sagas)))


def raw_select(url: str) -> tuple[int, float]:
    start = time.perf_counter()
    rows = 0
    with psycopg.connect(url) as conn, conn.cursor(name="raw", binary=True) as cur:
        cur.itersize = 2000
        cur.execute(RAW)
        for _ in cur:
            rows += 1
    return rows, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="cap the log at ~100k events")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                        help="rebuild processes (default: min(4, CPUs), as the CLI does)")
    parser.add_argument("--database-url", default=None, help="a server to create a database on")
    args = parser.parse_args()
    with postgres_server(args.database_url) as server:
        return _measure(server, args)


def _measure(server: str, args: argparse.Namespace) -> int:
    """Grow, project and rebuild a log in a database of its own on ``server``, and print."""
    total = 100_000 if args.quick else 1_000_000
    steps = 10
    url = fresh_database(server)
    migrate_all(url)
    ctx = ProjectionContext.connect(url, pool_size=10)
    ctx.definitions.register_shared(trip_definition())

    # Projector memory: grow the log step by step, projecting as it grows.
    runner = ProjectionRunner(ctx, batch_size=args.batch)
    per_step = total // steps // len(TripScript().completed().events)
    written = 0
    samples: list[tuple[int, float]] = []
    print(f"writing {total} events in {steps} steps, projecting after each step")
    for _ in range(steps):
        written += write_sagas(ctx, per_step)
        runner.catch_up()
        runner.catch_up()
        samples.append((written, rss_mb()))
        print(f"  {written:>9} events projected  RSS {samples[-1][1]:7.1f} MiB", flush=True)
    runner.close()

    # Rebuild speed against a raw SELECT of the same rows, alternating rounds.
    raw_rates, rebuild_rates = [], []
    for n in range(args.rounds):
        rows, raw_s = raw_select(url)
        raw_rates.append(rows / raw_s)
        report = rebuild(ctx, batch_size=args.batch, workers=args.workers)
        rebuild_rates.append(report.events_applied / report.elapsed_s)
        print(f"  round {n + 1}: raw SELECT {rows / raw_s:>10,.0f} ev/s   rebuild"
              f" {report.events_per_s:>9,.0f} ev/s ({report.events_applied} events)", flush=True)
    raw_median = statistics.median(raw_rates)
    rebuild_median = statistics.median(rebuild_rates)
    first, last = samples[0], samples[-1]
    print()
    print(f"log size                 {written:,} events")
    print(f"raw SELECT median        {raw_median:,.0f} events/s")
    print(f"rebuild median           {rebuild_median:,.0f} events/s ({args.workers} processes)")
    print(f"rebuild / raw SELECT     {rebuild_median / raw_median:.2f}x (target >= 0.5x)")
    print(f"projector RSS            {first[1]:.1f} MiB at {first[0]:,} events ->"
          f" {last[1]:.1f} MiB at {last[0]:,} events ({last[1] / first[1]:.2f}x)")
    ctx.close()
    drop_database(server, url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
