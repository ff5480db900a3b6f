"""Benchmark the console's saga list: the first page and a deep page of every filter, at 1k,
10k and 100k sagas, and how the time grows (target: flat, 100k/1k <= 1.3x).

Each size gets a fresh, migrated database whose active ``saga_summary`` table set is filled
by one ``INSERT ... SELECT generate_series`` (read-model rows only: no events behind them,
which the list never reads). Of every 10 rows, 8 are tenant ``bench`` and 2 another tenant;
states follow a production-like mix (mostly COMPLETED, a few percent of each other state),
four definitions in turn, one start per minute back from two days ago, so every saga that
is not terminal is also stuck (no progress for more than 15 minutes).

Every query goes through ``projections.browse_sagas`` as the console calls it (a pooled
connection, the active-version lookup, the page query), a page of 50. "deep" continues
from a cursor 90% of the way down the filtered list (taken untimed, beforehand). Rounds
interleave the sizes (rotating which goes first) so drift of the shared machine hits them
alike; medians are printed with the 100k/1k ratio, the rows shown, the buffers (8 KiB
pages) the page query touched at each size per EXPLAIN (ANALYZE, BUFFERS) — the work done,
which the machine's load cannot blur — and the plan's scan at 100k.

Usage: python scripts/bench_console.py [--rounds N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from bench_databases import drop_database, new_database, postgres_server
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from projections import (  # noqa: E402
    BrowsePage,
    ProjectionContext,
    SagaCursor,
    SagaFilter,
    browse_sagas,
)
from projections.rows import SummaryRow, columns  # noqa: E402
from projections.saga_browse import _where  # noqa: E402
from projections.tables import active_version, table  # noqa: E402
from saga_core.contracts import SagaStatus  # noqa: E402
from sagafleet.migrate import migrate_all  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
PAGE = 50
TENANT = "bench"
EPOCH = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)

# One row per generated integer i: the tenant, state and definition cycle with i.
FILL = """
INSERT INTO {t} (saga_id, stream_version, tenant, definition_name, definition_version,
                 definition_hash, state, phase, started_at, updated_at, finished_at,
                 compensation_started_at, current_steps, last_error, last_error_class,
                 retry_budget_left, cancel_requested, escalations, escalation_reason)
SELECT md5(i::text)::uuid::text, 14,
       CASE WHEN i %% 10 < 8 THEN %(tenant)s ELSE 'other' END,
       (ARRAY['trip', 'refund', 'onboarding', 'ticket'])[1 + i %% 4], 1, repeat('a', 64),
       CASE WHEN i %% 100 < 85 THEN 'COMPLETED' WHEN i %% 100 < 90 THEN 'COMPENSATED'
            WHEN i %% 100 < 92 THEN 'PARTIALLY_COMPENSATED'
            WHEN i %% 100 < 93 THEN 'COMMITTED_WITH_REPAIR' WHEN i %% 100 < 96 THEN 'RUNNING'
            WHEN i %% 100 < 98 THEN 'MANUAL_INTERVENTION' ELSE 'COMPENSATING' END,
       'forward', %(epoch)s - make_interval(mins => i), %(epoch)s - make_interval(mins => i)
           + interval '30 seconds', NULL, NULL, '{{}}', '', NULL, 10, false, 0, NULL
  FROM generate_series(1, %(n)s) AS i
"""

CASES: dict[str, SagaFilter] = {
    "no filter": SagaFilter(),
    "status=COMPLETED": SagaFilter(status=SagaStatus.COMPLETED),
    "status=MANUAL_INTERVENTION": SagaFilter(status=SagaStatus.MANUAL_INTERVENTION),
    "definition=refund": SagaFilter(definition="refund"),
    "status+definition": SagaFilter(status=SagaStatus.COMPLETED, definition="refund"),
    "started before (older than)": SagaFilter(started_before=EPOCH - timedelta(minutes=500)),
    "started after": SagaFilter(started_after=EPOCH - timedelta(minutes=900)),
    "stuck": SagaFilter(stuck=True),
}


def fresh_database(server_url: str, size: int) -> str:
    return new_database(server_url, f"bench_console_{size}")


def fill(url: str, size: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        version = active_version(conn, "sagas")
        conn.execute(sql.SQL(FILL).format(t=table("saga_summary", version)),
                     {"tenant": TENANT, "epoch": EPOCH, "n": size})
        conn.execute(sql.SQL("ANALYZE {}").format(table("saga_summary", version)))


def deep_cursor(ctx: ProjectionContext, filters: SagaFilter) -> SagaCursor | None:
    """The cursor 90% of the way down the filtered list (OFFSET here only: untimed setup)."""
    where, params = _where(filters)
    with ctx.connection() as conn:
        version = active_version(conn, "sagas")
        total = conn.execute(
            sql.SQL("SELECT count(*) FROM {t} WHERE {w}").format(
                t=table("saga_summary", version), w=sql.SQL(" AND ").join(where)),
            {**params, "tenant": TENANT}).fetchone()
        count = int(total[0]) if total else 0
        # 90% down, but leaving a whole page after it when the filtered list has one.
        skip = max(0, min(count * 9 // 10, count - PAGE - 1))
        row = conn.execute(
            sql.SQL("SELECT started_at, saga_id FROM {t} WHERE {w}"
                    " ORDER BY started_at DESC, saga_id DESC OFFSET %(skip)s LIMIT 1").format(
                t=table("saga_summary", version), w=sql.SQL(" AND ").join(where)),
            {**params, "tenant": TENANT, "skip": skip}).fetchone()
    return SagaCursor(row[0], row[1]) if row else None


def explained(ctx: ProjectionContext, filters: SagaFilter,
              cursor: SagaCursor | None) -> tuple[str, int]:
    """The scan the planner picks for the page query (Index Scan using ...) and the buffers
    (8 KiB pages) it touched when run: the work done, whatever the machine's load."""
    where, params = _where(filters)
    if cursor is not None:
        where.append(sql.SQL("(started_at, saga_id) < (%(at)s, %(id)s)"))
        params |= {"at": cursor.started_at, "id": cursor.saga_id}
    with ctx.connection() as conn:
        version = active_version(conn, "sagas")
        query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT {c} FROM {t} WHERE {w}"
                        " ORDER BY started_at DESC, saga_id DESC LIMIT {rows}").format(
            c=sql.SQL(", ").join(map(sql.Identifier, columns(SummaryRow))),
            t=table("saga_summary", version), w=sql.SQL(" AND ").join(where),
            rows=sql.Literal(PAGE + 1))
        plan: Any = conn.execute(query, {**params, "tenant": TENANT}).fetchone()
    top = plan[0][0]["Plan"]
    touched = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    node = top
    while node.get("Node Type") in ("Limit", "Sort") and node.get("Plans"):
        node = node["Plans"][0]
    return f"{node['Node Type']} {node.get('Index Name', '')}".strip(), touched


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1000


def shown(run: Callable[[], object]) -> int:
    page = run()
    return len(page.sagas) if isinstance(page, BrowsePage) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--database-url", default=None, help="a server to create databases on")
    args = parser.parse_args()
    with postgres_server(args.database_url) as server:
        return _measure(server, args)


def _measure(server: str, args: argparse.Namespace) -> int:
    """Measure on databases of its own on ``server``, and print."""
    urls = {size: fresh_database(server, size) for size in SIZES}
    contexts: dict[int, ProjectionContext] = {}
    try:
        for size, url in urls.items():
            migrate_all(url)
            fill(url, size)
            contexts[size] = ProjectionContext.connect(url, pool_size=2)
            print(f"filled {size:>7,} sagas ({int(size * 0.8):,} of tenant {TENANT!r})",
                  flush=True)
        search_ids = {size: _a_saga_id(contexts[size]) for size in SIZES}
        queries: dict[tuple[str, str], dict[int, Callable[[], object]]] = {}
        plans: dict[tuple[str, str], dict[int, tuple[str, int]]] = {}
        cases = {**CASES, "search by id/key": None}
        for label, maybe in cases.items():
            depths = ("first",) if maybe is None else ("first", "deep")
            for depth in depths:
                filters = {size: maybe or SagaFilter(saga_ids=(search_ids[size],))
                           for size in SIZES}
                cursors = {size: deep_cursor(contexts[size], filters[size])
                           if depth == "deep" else None for size in SIZES}
                queries[(label, depth)] = {
                    size: _page(contexts[size], filters[size], cursors[size]) for size in SIZES}
                plans[(label, depth)] = {
                    size: explained(contexts[size], filters[size], cursors[size])
                    for size in SIZES}
        samples: dict[tuple[str, str, int], list[float]] = {}
        for run in queries.values():  # warm the pools and caches, untimed
            for call in run.values():
                call()
        for round_no in range(args.rounds):
            # Rotate which size goes first, so none is always measured right after another.
            order = SIZES[round_no % len(SIZES):] + SIZES[:round_no % len(SIZES)]
            for (label, depth), run in queries.items():
                for size in order:
                    samples.setdefault((label, depth, size), []).append(timed(run[size]))
        print(f"\nmedian ms per page of {PAGE} over {args.rounds} rounds "
              "(browse_sagas: pool + active version + page query)")
        head = "".join(f"{f'{s // 1000}k':>9}" for s in SIZES)
        print(f"{'filter':<30}{'page':<7}{head}{'100k/1k':>9}  rows shown  buffers     "
              "plan at 100k")
        worst, worst_all, worst_fastest, extra_buffers = 0.0, 0.0, 0.0, 0
        uneven: list[str] = []
        for (label, depth) in queries:
            medians = [statistics.median(samples[(label, depth, s)]) for s in SIZES]
            ratio = medians[-1] / medians[0]
            work = plans[(label, depth)]
            counts = [shown(queries[(label, depth)][size]) for size in SIZES]
            worst_all = max(worst_all, ratio)
            if len(set(counts)) == 1:  # the same rows at every size: the same work expected
                worst = max(worst, ratio)
                fastest = [min(samples[(label, depth, s)]) for s in SIZES]
                worst_fastest = max(worst_fastest, fastest[-1] / fastest[0])
                extra_buffers = max(extra_buffers, work[SIZES[-1]][1] - work[SIZES[0]][1])
            else:
                uneven.append(f"{label} {depth}")
            cells = "".join(f"{m:>9.2f}" for m in medians)
            rows = "/".join(map(str, counts))
            touched = "/".join(str(work[s][1]) for s in SIZES)
            print(f"{label:<30}{depth:<7}{cells}{ratio:>8.2f}x  {rows:<10}  {touched:<10}  "
                  f"{work[SIZES[-1]][0]}")
        print(f"\nworst 100k/1k time ratio: {worst:.2f}x where every size shows a full page "
              f"(target <= 1.3x); {worst_all:.2f}x over every row above")
        print(f"worst 100k/1k ratio of the fastest runs (least disturbed by other load): "
              f"{worst_fastest:.2f}x")
        print(f"buffers touched at 100k: at most {extra_buffers} more than at 1k "
              "(one more B-tree level, a page boundary)")
        if uneven:
            print(f"fewer matching sagas than a page at 1k (less work there): {', '.join(uneven)}")
    finally:
        for ctx in contexts.values():
            ctx.close()
        for url in urls.values():
            drop_database(server, url)
    return 0


def _page(ctx: ProjectionContext, filters: SagaFilter,
          cursor: SagaCursor | None) -> Callable[[], object]:
    return lambda: browse_sagas(ctx, tenant=TENANT, limit=PAGE, filters=filters,
                                older_than=cursor)


def _a_saga_id(ctx: ProjectionContext) -> str:
    page = browse_sagas(ctx, tenant=TENANT, limit=1, filters=SagaFilter(
        started_before=EPOCH - timedelta(minutes=700)))
    return page.sagas[0].saga_id


if __name__ == "__main__":
    sys.exit(main())
