"""Profile one worker's hot path in process: CPU per trip saga, and where it goes.

A client starts trip sagas whose wake-ups are collected in a list instead of the broker;
this process then runs each as ``sagafleet.step`` would (``workers.tasks.run_step``), with
the zero-cost memory tools (scripts/memory_tools.py) and the saga's branches run inline, so
cProfile sees every commit. Real PostgreSQL (a fresh database, dropped at the end).

    python scripts/profile_worker.py --database-url postgresql://postgres@127.0.0.1:5432/test
    python scripts/profile_worker.py --database-url ... --sagas 200 --profile 40

Prints wall and CPU milliseconds per saga for the client's starts and the worker's steps;
with ``--profile N`` also the worker's N costliest functions in CPU time (``--sort tottime``:
by each function's own time). Compare two commits by running it alternately on each: a
figure from one run is not a benchmark.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import drop_database  # noqa: E402
from bench_fleet import TRIP, fresh_database  # noqa: E402
from memory_tools import trip_tools  # noqa: E402

from application.messages import StepCommand  # noqa: E402
from sagafleet.example_sagas.registration import register_trip  # noqa: E402
from workers.fleet import Fleet, FleetConfig  # noqa: E402
from workers.tasks import run_step  # noqa: E402

WARM_UP = 20  # sagas run before measuring: prepared statements, caches, imports


class InlineThreads(Executor):
    """Runs a branch at once on the calling thread (cProfile profiles one thread)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn`` now; its result as a done future."""
        done: Future[Any] = Future()
        done.set_result(fn(*args, **kwargs))
        return done


class CollectedWakeUps:
    """A publisher keeping the wake-ups for this process to run (no broker)."""

    def __init__(self) -> None:
        self.queue: collections.deque[StepCommand] = collections.deque()

    def publish(self, commands: Sequence[StepCommand]) -> int:
        """Keep the commands in order."""
        self.queue.extend(commands)
        return len(commands)


def per_saga(began: tuple[float, float], sagas: int) -> str:
    """Wall and CPU milliseconds per saga since ``began`` (perf_counter, process_time)."""
    wall = (time.perf_counter() - began[0]) / sagas * 1e3
    cpu = (time.process_time() - began[1]) / sagas * 1e3
    return f"{wall:.2f} ms wall, {cpu:.2f} ms CPU per saga"


def main() -> None:
    """Start, run and report."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True, help="PostgreSQL server")
    parser.add_argument("--sagas", type=int, default=200)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also print the worker's N costliest functions (CPU time)")
    parser.add_argument("--sort", choices=("cumulative", "tottime"), default="cumulative",
                        help="order of --profile: with callees, or each function's own time")
    args = parser.parse_args()
    database = fresh_database(args.database_url)
    # The broker is never reached: wake-ups are collected here.
    fleet = Fleet(FleetConfig(database_url=database, broker_url="redis://127.0.0.1:1/0"),
                  trip_tools())
    wake_ups = CollectedWakeUps()
    fleet.__dict__["publisher"], fleet.__dict__["branches"] = wake_ups, InlineThreads()

    def run_all() -> None:
        while wake_ups.queue:
            run_step(fleet, wake_ups.queue.popleft().as_args(), {})

    try:
        register_trip(fleet)
        client = fleet.client(actor="profile")
        for index in range(WARM_UP):
            client.start("trip", TRIP, key=f"warm-{time.time()}-{index}")
        run_all()
        began = time.perf_counter(), time.process_time()
        for index in range(args.sagas):
            client.start("trip", TRIP, key=f"profile-{time.time()}-{index}")
        print(f"client: {per_saga(began, args.sagas)}")
        # CPU time, not wall: a wait for the server is not the worker's cost.
        profile = cProfile.Profile(time.process_time)
        began = time.perf_counter(), time.process_time()
        if args.profile:
            profile.enable()
        run_all()
        profile.disable()
        print(f"worker: {per_saga(began, args.sagas)}")
        if args.profile:
            pstats.Stats(profile).sort_stats(args.sort).print_stats(args.profile)
    finally:
        fleet.close()
        drop_database(args.database_url, database)


if __name__ == "__main__":
    main()
