"""The server's commit ceiling: plain INSERT + COMMIT per second with 1, 4 and 16 connections,
and the same with a NOTIFY in each transaction (as every event store append sends).

What a fleet that commits once a step can reach on a machine is bounded by how many commits
per second its PostgreSQL takes. This measures that bound on the same server the other
benchmarks use: each connection is its own process (so the client's interpreter is never
the limit) inserting one small row per transaction, autocommit, for ``--seconds``; the
figure is commits per second summed over the connections, median of ``--runs``.

    python scripts/commit_ceiling.py                        # embedded PostgreSQL
    python scripts/commit_ceiling.py --url postgresql://postgres@127.0.0.1:5432/test
    python scripts/commit_ceiling.py --connections 1 2 4 8 16 --json

Compare ``bench_fleet.py``'s sagas per second times the commits a saga makes (five for a
trip: its start and four worker commits) with the ceiling at the fleet's connection count. A
transaction that sent a NOTIFY takes, as it commits, a lock that every other such commit
waits for (PostgreSQL's notification queue), so their commits do not share WAL flushes: the
second figure is the ceiling of a store that notifies in each append's transaction (the
plain path, ``notify_in_commit=True``). The third is the store's default: plain commits, each
followed by a wake-up asked of its after-commit notifier (``events.eventstore.waking``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from typing import Final

import psycopg
from bench_databases import drop_database, new_database, postgres_server

from events.eventstore.waking import AfterCommitNotifier

TABLE = "bench_commit_ceiling"


INSERT: Final = f"INSERT INTO {TABLE} (note) VALUES (%s)"
#: The same, notifying a channel in the same transaction, as the event store's appends do
#: (a committing transaction that notified holds a lock every other such commit waits for).
INSERT_NOTIFY: Final = (f"WITH row AS (INSERT INTO {TABLE} (note) VALUES (%s) RETURNING id)"
                        " SELECT pg_notify('commit_ceiling', id::text) FROM row")


AFTER_COMMIT: Final = "after_commit"
"""Plain INSERTs, each commit followed by a wake-up asked of the store's notifier
(``events.eventstore.waking``: one NOTIFY at a time per process, at most one every 20 ms,
in a transaction of its own), as the store's appends do by default."""


def _commit_loop(url: str, statement: str, seconds: float, start_at: float,
                 out: multiprocessing.Queue) -> None:
    """One connection: ``statement`` + COMMIT until ``seconds`` after ``start_at``; put the
    count."""
    notifier = AfterCommitNotifier(url) if statement == AFTER_COMMIT else None
    sql = INSERT if notifier is not None else statement
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql, ("warm",))
        while time.time() < start_at:
            time.sleep(0.001)
        done, deadline = 0, start_at + seconds
        while time.time() < deadline:
            conn.execute(sql, ("step done",))
            if notifier is not None:
                notifier.wake()
            done += 1
    if notifier is not None:
        notifier.close()
    out.put(done)


def commits_per_second(url: str, connections: int, seconds: float,
                       statement: str = INSERT) -> float:
    """Commits per second of ``statement`` over ``connections`` processes, each on its own
    connection."""
    results: multiprocessing.Queue = multiprocessing.Queue()
    start_at = time.time() + 1.0 + 0.05 * connections  # every connection open first
    procs = [multiprocessing.Process(target=_commit_loop,
                                     args=(url, statement, seconds, start_at, results))
             for _ in range(connections)]
    for proc in procs:
        proc.start()
    total = sum(results.get(timeout=seconds + 120) for _ in procs)
    for proc in procs:
        proc.join()
    return total / seconds


LABELS: Final = {"insert": "insert", "insert_notify": "insert + notify",
                 "insert_wake_after": "insert, wake-up after commit"}


def main() -> None:
    """Measure and print (or print one JSON line)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="PostgreSQL server (default: embedded)")
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    with postgres_server(args.url) as server:
        _measure(server, args)


def _measure(server: str, args: argparse.Namespace) -> None:
    """Measure on a database of its own on ``server``, and print."""
    database = new_database(server, "commit_ceiling")
    try:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {TABLE} (id bigserial PRIMARY KEY, note text NOT NULL,"
                         " at timestamptz NOT NULL DEFAULT now())")
            settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                        for name in ("synchronous_commit", "fsync", "wal_sync_method")}
        modes = (("insert", INSERT), ("insert_notify", INSERT_NOTIFY),
                 ("insert_wake_after", AFTER_COMMIT))
        found: dict[str, dict[str, dict[str, object]]] = {name: {} for name, _ in modes}
        for connections in args.connections:
            for name, statement in modes:
                runs = [commits_per_second(database, connections, args.seconds, statement)
                        for _ in range(args.runs)]
                found[name][str(connections)] = {
                    "commits_per_s": round(statistics.median(runs), 1),
                    "runs": [round(r, 1) for r in runs]}
                if not args.json:
                    print(f"{connections:>3} connections, {LABELS[name]:<28}"
                          f" {statistics.median(runs):8.0f} commits/s"
                          f"  (runs: {', '.join(f'{r:.0f}' for r in runs)})", flush=True)
        if args.json:
            print(json.dumps({"commit_ceiling": found, "server": settings}))
        else:
            print("server: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    finally:
        drop_database(server, database)


if __name__ == "__main__":
    main()
