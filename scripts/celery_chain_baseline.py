"""Baseline for bench_fleet: a raw Celery chain of 4 no-op tasks, same broker and settings.

Each task enqueues the next (as a saga step would), the fourth counts a finished chain
in Redis. Run as ``python scripts/celery_chain_baseline.py worker BROKER_URL [CONCURRENCY]
[DATABASE_URL]`` to start a worker (solo, or a threads pool of CONCURRENCY as ``sagafleet
worker`` runs), or import :func:`run_baseline` to time ``chains`` chains on running workers.

With DATABASE_URL the chain is *durable*: each task first commits a row naming its step to
PostgreSQL (one INSERT and commit, on one connection per worker thread), the least a
hand-written chain needs to know after a crash which steps ran. It is not the target's
baseline (that is the raw chain); it shows how much of the fleet's cost is durability.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid

import psycopg
from celery import Celery

from workers.celery_app import BrokerSettings, broker_redis, create_celery_app

CHAIN_LENGTH = 4
COUNTER = "bench:chains_done"
STEPS_TABLE = "bench_chain_steps"


def create_steps_table(database_url: str) -> None:
    """The durable chain's table, emptied: one row per step a task ran."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {STEPS_TABLE} (chain_id text NOT NULL,"
                     " step int NOT NULL, at timestamptz NOT NULL DEFAULT now(),"
                     " PRIMARY KEY (chain_id, step))")
        conn.execute(f"TRUNCATE {STEPS_TABLE}")


def build_app(broker_url: str, database_url: str | None = None) -> Celery:
    """The baseline app: the fleet's own safety settings, one task that chains (a no-op, or
    with ``database_url`` one that first commits a row for its step)."""
    # Task events and remote control off, as in Celery's defaults for events and as the
    # baseline was before the fleet turned them on for Celery's tools: the fleet pays for
    # its events in the comparison, the hand-written chain does not.
    app = create_celery_app(BrokerSettings(broker_url=broker_url, remote_control=False),
                            name="bench-baseline")
    counter = broker_redis(broker_url)
    local = threading.local()  # a connection per pool thread: psycopg's are not shared

    def record(chain_id: str, index: int) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = psycopg.connect(database_url, autocommit=True)
        conn.execute(f"INSERT INTO {STEPS_TABLE} (chain_id, step) VALUES (%s, %s)",
                     (chain_id, index))

    @app.task(name="bench.noop_step")
    def noop_step(chain_id: str, index: int) -> None:
        if database_url is not None:
            record(chain_id, index)
        if index + 1 < CHAIN_LENGTH:
            noop_step.apply_async(args=[chain_id, index + 1], queue="bench.baseline")
        else:
            counter.incr(COUNTER)

    return app


def run_baseline(broker_url: str, chains: int, timeout_s: float = 600.0) -> float:
    """Enqueue ``chains`` chains on running baseline workers; return chains per second."""
    app = build_app(broker_url)
    counter = broker_redis(broker_url)
    counter.set(COUNTER, 0)
    started = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for _ in range(chains):
            app.send_task("bench.noop_step", args=[uuid.uuid4().hex, 0],
                          queue="bench.baseline", producer=producer)
    deadline = started + timeout_s
    while int(counter.get(COUNTER) or 0) < chains:
        if time.perf_counter() > deadline:
            done = int(counter.get(COUNTER) or 0)
            raise TimeoutError(f"baseline: only {done} of {chains} chains done")
        time.sleep(0.005)
    return chains / (time.perf_counter() - started)


if __name__ == "__main__":
    if len(sys.argv) not in {3, 4, 5} or sys.argv[1] != "worker":
        print("usage: celery_chain_baseline.py worker BROKER_URL [CONCURRENCY [DATABASE_URL]]",
              file=sys.stderr)
        sys.exit(2)  # a usage error, as argparse exits
    concurrency = int(sys.argv[3]) if len(sys.argv) >= 4 else 1
    durable_url = sys.argv[4] if len(sys.argv) == 5 else None
    # The pool `sagafleet worker --concurrency N` runs: solo for 1, threads otherwise.
    pool = "solo" if concurrency == 1 else "threads"
    build_app(sys.argv[2], durable_url).worker_main(
        ["worker", f"--pool={pool}", f"--concurrency={concurrency}", "--queues=bench.baseline",
         "--loglevel=WARNING", "--without-heartbeat", "--without-mingle", "--without-gossip"]
    )
