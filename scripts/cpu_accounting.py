"""CPU time by role over a benchmark's timed phase: worker processes, the PostgreSQL backends
of its database, Redis, and this process (scripts only; Linux, servers on this machine).

A throughput ratio says how far apart two systems are; this says where the time goes. On a
machine whose cores the servers share with the workers, every role's CPU counts:

    meter = CpuMeter(workers=[pid, ...], broker=url, database=conn)  # at the phase's start
    ...                                                              # the timed work
    seconds = meter.stop()           # {"workers": ..., "postgres": ..., "redis": ..., ...}

A role that cannot be read here (a server on another machine, no /proc) is left out.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import psycopg

from workers.celery_app import broker_redis

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

ROLES = ("workers", "postgres", "redis", "client")
"""The roles :meth:`CpuMeter.stop` reads, in the order the benchmarks print them."""


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process and all its threads so far (None: unreadable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name, which is in parentheses and may hold spaces.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _total(pids: Iterable[int], before: Mapping[int, float]) -> float | None:
    """CPU seconds the processes used since ``before`` (a process new since then: all of it)."""
    used, seen = 0.0, False
    for pid in pids:
        now = process_cpu_s(pid)
        if now is not None:
            used, seen = used + now - before.get(pid, 0.0), True
    return used if seen else None


class CpuMeter:
    """Starts counting when made; :meth:`stop` returns CPU seconds by role since then."""

    def __init__(self, *, workers: Sequence[int], broker: str,
                 database: psycopg.Connection[tuple[object, ...]] | None = None) -> None:
        self._workers = list(workers)
        self._redis = broker_redis(broker)
        self._database = database
        self._worker_start = self._read(self._workers)
        self._backend_start = self._read(self._backends())
        self._redis_start = self._redis_cpu_s()
        self._client_start = time.process_time()

    def stop(self) -> dict[str, float]:
        """CPU seconds by role since the meter was made (roles that could be read)."""
        found = {
            "workers": _total(self._workers, self._worker_start),
            "postgres": _total(self._backends(), self._backend_start),
            "redis": self._redis_cpu_s() - self._redis_start,
            "client": time.process_time() - self._client_start,
        }
        return {role: seconds for role, seconds in found.items() if seconds is not None}

    def _backends(self) -> list[int]:
        """The database's server processes, but the one this meter asks through."""
        if self._database is None:
            return []
        rows = self._database.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
        return [int(str(pid)) for (pid,) in rows]

    def _redis_cpu_s(self) -> float:
        info = self._redis.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    @staticmethod
    def _read(pids: Iterable[int]) -> dict[int, float]:
        return {pid: cpu for pid in pids if (cpu := process_cpu_s(pid)) is not None}


def total_ms(run: Mapping[str, float], items: int) -> float:
    """CPU milliseconds per item of one run, every role read together."""
    return sum(run.get(role, 0.0) for role in ROLES) * 1000 / items


def per_item_ms(runs: Sequence[Mapping[str, float]], items: int) -> str:
    """Each role's median CPU milliseconds per item over ``runs``, and their sum."""
    roles = [role for role in ROLES if all(role in run for run in runs)]
    if not runs or not roles:
        return "n/a"
    medians = {role: statistics.median(run[role] for run in runs) * 1000 / items
               for role in roles}
    parts = ", ".join(f"{role} {ms:.2f}" for role, ms in medians.items())
    return f"{parts}; total {sum(medians.values()):.2f}"
