"""Benchmark the health page's charts: ``projections.trends.collect_trends`` for the last hour and
the last 24 hours, at 10k and 100k sagas, and how the time grows with the table (target: flat,
since the window holds the same sagas at both sizes).

Each size gets a fresh, migrated database whose active read-model tables are filled by
``INSERT ... SELECT generate_series`` (read-model rows only, no events behind them: the charts
never read the log): one saga started every 30 s back from now, 8 in 10 of tenant ``bench``,
mostly COMPLETED with a few percent compensated, escalated or still running, four operations
each, and a sweeper redelivery for one saga in fifty. So the last hour holds ~120 sagas of the
tenant and the last day ~2900 at either size, while the table grows tenfold.

Rounds interleave the sizes (rotating which goes first) so drift of the shared machine hits
them alike; the medians are printed with the 100k/10k ratio, and the plan of the
finished-sagas query at 100k (the index range scan it should be).

Usage: python scripts/bench_health.py [--rounds N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_databases import drop_database, new_database, postgres_server  # noqa: E402

from projections import ProjectionContext  # noqa: E402
from projections.tables import active_version, table  # noqa: E402
from projections.trends import (  # noqa: E402
    _BUCKET,
    _FINISHED,
    _OPERATIONS,
    _REDELIVERIES,
    _STARTED,
    TrendWindow,
    collect_trends,
)
from sagafleet.migrate import migrate_all  # noqa: E402

SIZES = (10_000, 100_000)
WINDOWS = ("1h", "24h")
TENANT = "bench"

FILL_SUMMARY = """
INSERT INTO {s} (saga_id, stream_version, tenant, definition_name, definition_version,
                 definition_hash, state, phase, started_at, updated_at, finished_at,
                 compensation_started_at, current_steps, last_error, last_error_class,
                 retry_budget_left, cancel_requested, escalations, escalation_reason)
SELECT 'saga-' || i, 14, CASE WHEN i %% 10 < 8 THEN %(tenant)s ELSE 'other' END,
       'trip', 1, repeat('a', 64), state, 'forward',
       now() - make_interval(secs => i * 30), now() - make_interval(secs => i * 30 - 20),
       CASE WHEN state IN ('RUNNING', 'MANUAL_INTERVENTION') THEN NULL
            ELSE now() - make_interval(secs => i * 30 - 20 - i %% 7) END,
       NULL, '{{}}', '', NULL, 10, false, CASE WHEN i %% 100 < 3 THEN 1 ELSE 0 END, NULL
  FROM (SELECT i, CASE WHEN i %% 100 < 88 THEN 'COMPLETED' WHEN i %% 100 < 94 THEN 'COMPENSATED'
                       WHEN i %% 100 < 95 THEN 'PARTIALLY_COMPENSATED'
                       WHEN i %% 100 < 97 THEN 'MANUAL_INTERVENTION' ELSE 'RUNNING' END AS state
          FROM generate_series(1, %(n)s) AS i) AS g
"""

FILL_STEPS = """
INSERT INTO {r} (saga_id, step_id, kind, tool, tool_version, semantics, status, attempts,
                 operation_key, receipt, error_class, error_message, worker_id,
                 lease_expires_at, starts, successes, distinct_receipts, failures, ambiguous,
                 reconciliations_found, reconciliations_absent, reconciliations_unknown,
                 first_started_at, succeeded_at, changed_at, started_without_approval)
SELECT 'saga-' || i, step, 'forward', 'tool.' || step, 1, 'compensable', 'succeeded',
       1 + (i %% 13 = 0)::int, md5(i::text || step), NULL, NULL, '', NULL, NULL,
       1 + (i %% 13 = 0)::int, 1, 1, 0, 0, 0, 0, 0,
       now() - make_interval(secs => i * 30), now() - make_interval(secs => i * 30 - 5),
       now() - make_interval(secs => i * 30 - 5), false
  FROM generate_series(1, %(n)s) AS i,
       unnest(ARRAY['hold_flight', 'hold_hotel', 'capture_payment', 'send_itinerary']) AS step
"""

FILL_REDELIVERIES = """
INSERT INTO fleet.redeliveries (saga_id, step_id, kind, attempt, action)
SELECT 'saga-' || i, 'capture_payment', 'forward', 1, 'execute'
  FROM generate_series(1, %(n)s, 50) AS i
"""


def _filled(server: str, n: int) -> str:
    url = new_database(server, "bench_health")
    migrate_all(url)
    with psycopg.connect(url, autocommit=True) as conn:
        version = active_version(conn, "sagas")
        conn.execute(sql.SQL(FILL_SUMMARY).format(s=table("saga_summary", version)),
                     {"n": n, "tenant": TENANT})
        conn.execute(sql.SQL(FILL_STEPS).format(r=table("step_runs", version)), {"n": n})
        conn.execute(FILL_REDELIVERIES, {"n": n})
        conn.execute("ANALYZE")
    return url


def _buffers(url: str, window: str) -> int:
    """Shared buffers (8 KiB pages) the four queries of ``window`` touch, per EXPLAIN (ANALYZE,
    BUFFERS): the work done, which the machine's load cannot blur."""
    total = 0
    with psycopg.connect(url, autocommit=True) as conn:
        version = active_version(conn, "sagas")
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        span = TrendWindow.ending(window, now)
        params = {"tenant": TENANT, "start": span.start, "end": span.end,
                  "bucket_s": span.bucket_s, "terminal": ["COMPLETED", "COMPENSATED",
                                                          "PARTIALLY_COMPENSATED",
                                                          "COMMITTED_WITH_REPAIR"]}
        for template, column in ((_FINISHED, "s.finished_at"), (_STARTED, "s.started_at"),
                                 (_OPERATIONS, "s.started_at"),
                                 (_REDELIVERIES, "s.started_at")):
            query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + template).format(
                bucket=sql.SQL(_BUCKET.format(column=column)),
                summary=table("saga_summary", version), steps=table("step_runs", version))
            plan = conn.execute(query, params).fetchone()[0][0]["Plan"]  # type: ignore[index]
            total += int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])
    return total


def _plan(url: str) -> str:
    """The plan of the finished-sagas query (the largest window) at this size."""
    with psycopg.connect(url, autocommit=True) as conn:
        version = active_version(conn, "sagas")
        rows = conn.execute(sql.SQL(
            "EXPLAIN SELECT count(*) FROM {} s WHERE s.tenant = %s"
            " AND s.finished_at >= now() - interval '24 hours' AND s.finished_at < now()"
        ).format(table("saga_summary", version)), (TENANT,)).fetchall()
    return "\n".join(f"    {row[0]}" for row in rows)


def main() -> int:
    """Fill, time interleaved rounds, print medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--database-url", default=None,
                        help="a server whose user may create databases (default: embedded)")
    args = parser.parse_args()
    with postgres_server(args.database_url) as server:
        return _measure(server, args.rounds)


def _measure(server: str, rounds: int) -> int:
    """Fill a database per size on ``server``, time the charts in turns, and print."""
    urls = {n: _filled(server, n) for n in SIZES}
    contexts = {n: ProjectionContext.connect(url, pool_size=2) for n, url in urls.items()}
    timings: dict[tuple[int, str], list[float]] = {(n, w): [] for n in SIZES for w in WINDOWS}
    shown: dict[tuple[int, str], int] = {}
    try:
        for ctx in contexts.values():  # warm the pools and caches alike
            for window in WINDOWS:
                collect_trends(ctx, tenant=TENANT, window=window)
        for round_ in range(rounds):
            order = SIZES if round_ % 2 == 0 else tuple(reversed(SIZES))
            for n in order:
                for window in WINDOWS:
                    began = time.perf_counter()
                    trends = collect_trends(contexts[n], tenant=TENANT, window=window)
                    timings[(n, window)].append(time.perf_counter() - began)
                    shown[(n, window)] = sum(b.started for b in trends.buckets)
        small, large = SIZES
        print(f"collect_trends, median of {rounds} rounds (ms); sagas started in the window")
        for window in WINDOWS:
            a = statistics.median(timings[(small, window)]) * 1000
            b = statistics.median(timings[(large, window)]) * 1000
            print(f"  {window:>4}: {small // 1000}k {a:7.2f} ({shown[(small, window)]} sagas)"
                  f"   {large // 1000}k {b:7.2f} ({shown[(large, window)]} sagas)"
                  f"   ratio {large // 1000}k/{small // 1000}k {b / a:.2f}"
                  f"   buffers {_buffers(urls[small], window)} / {_buffers(urls[large], window)}")
        print(f"plan of the finished-sagas query at {large // 1000}k:")
        print(_plan(urls[large]))
    finally:
        for ctx in contexts.values():
            ctx.close()
        for url in urls.values():
            drop_database(server, url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
