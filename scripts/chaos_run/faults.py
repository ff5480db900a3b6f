"""The fleet's processes and the faults the run injects into them and into the servers.

Faults strike on a seeded schedule: a worker SIGKILLed every ``kill_every`` seconds (and a
replacement started), a worker SIGSTOPped past its lease (SIGCONT is its own scheduled
event, so the run keeps going meanwhile), Redis stopped and started empty, PostgreSQL
stopped (fast shutdown) and started again. Each server outage lasts a moment on purpose
and nudges the agent, so commands are published while the server is down.
"""

from __future__ import annotations

import heapq
import os
import random
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chaos_run.broker import snapshot
from sagafleet import embedded
from sagafleet.exit_codes import ExitCode
from sagafleet.processes import spawn_sagafleet, stop_processes

LEASE_S = 3.0
STOP_PAST_LEASE_S = LEASE_S + 2.0
REDIS_OUTAGE_S = 1.0
POSTGRES_OUTAGE_S = 2.0


@dataclass
class FaultRecord:
    """One fault the run injected: when, what, on which target, and what came of it."""

    at_s: float
    fault: str
    target: str = ""
    result: str = "ok"
    outage_s: float | None = None


@dataclass
class FleetProcesses:
    """The fleet's processes: workers (replaceable) and one sweeper."""

    env: dict[str, str]
    log_dir: Path
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    sweeper: subprocess.Popen[bytes] | None = None
    services: list[subprocess.Popen[bytes]] = field(default_factory=list)  # projector, ...
    killed: set[int] = field(default_factory=set)
    stopped: set[int] = field(default_factory=set)
    refused_start: dict[int, str] = field(default_factory=dict)  # pid -> its log file
    logs: dict[int, Path] = field(default_factory=dict)
    spawned: int = 0

    def spawn(self, role: str) -> subprocess.Popen[bytes]:
        """Start one ``sagafleet worker``, ``sagafleet sweeper`` or other service
        (``projector``)."""
        self.spawned += 1
        log = self.log_dir / f"{role}-{self.spawned}.log"
        proc = spawn_sagafleet([role], self.env, log)
        self.logs[proc.pid] = log
        if role == "worker":
            self.workers.append(proc)
        elif role == "sweeper":
            self.sweeper = proc
        else:
            self.services.append(proc)
        return proc

    def live_workers(self) -> list[subprocess.Popen[bytes]]:
        """Workers still running and not stopped."""
        return [p for p in self.workers if p.poll() is None and p.pid not in self.stopped]

    def supervise(self) -> None:
        """Play the supervisor for a worker that refused to start because a server was
        down (exit 6, UNAVAILABLE, before Celery's banner): start another, as systemd or
        Kubernetes would. A worker that was up and then died is a casualty instead."""
        for proc in list(self.workers):
            if (proc.poll() == ExitCode.UNAVAILABLE and proc.pid not in self.refused_start
                    and proc.pid not in self.killed and not _was_up(self.logs[proc.pid])):
                self.refused_start[proc.pid] = self.logs[proc.pid].name
                self.spawn("worker")

    def casualties(self) -> list[str]:
        """Processes that died without this run killing them (a refused start aside)."""
        dead = [p for p in [*self.workers, self.sweeper, *self.services]
                if p is not None and p.poll() is not None and p.pid not in self.killed
                and p.pid not in self.refused_start]
        return [f"pid {p.pid} ({self.logs[p.pid].stem}) exited with {p.returncode}; its log "
                f"ends: {_last_words(self.logs[p.pid])}" for p in dead]

    def stop(self) -> None:
        """Warm shutdown, then SIGKILL what is left; resume anything stopped first."""
        stop_processes([p for p in [*self.workers, self.sweeper, *self.services]
                        if p is not None], grace_s=15)


def _last_words(log: Path) -> str:
    """What a dead process said last that explains it: its last CRITICAL or ERROR record (or
    exception line of a traceback), else its last line; so the report names the cause."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
                 if line.strip()]
    except OSError as exc:
        return f"(unreadable: {exc})"
    telling = [line for line in lines if "CRITICAL" in line or "ERROR" in line
               or "Error:" in line or "Exception:" in line]
    return (telling or lines or ["(empty)"])[-1][:300]


def _was_up(log: Path) -> bool:
    """Whether a worker got as far as Celery's start-up banner (``celery@host:pid``)."""
    try:
        return "celery@" in log.read_text(errors="replace")
    except OSError:
        return False


def fault_schedule(duration_s: float, kill_every_s: float, seed: int) -> list[tuple[float, str]]:
    """When each fault strikes: kills every ``kill_every_s`` seconds, and the rarer faults
    (SIGSTOP, Redis and PostgreSQL restarts) spread over 15-85% of the run in seeded order."""
    rng = random.Random(seed)
    rare = (["sigstop_worker"] * max(1, round(duration_s / 100))
            + ["restart_redis"] * max(1, round(duration_s / 150))
            + ["restart_postgres"] * max(1, round(duration_s / 150)))
    rng.shuffle(rare)
    plan = [(duration_s * (0.15 + 0.7 * i / max(len(rare) - 1, 1)), fault)
            for i, fault in enumerate(rare)]
    at = duration_s * 0.1
    while at < duration_s * 0.9:
        plan.append((at + rng.uniform(-0.2, 0.2) * kill_every_s, "kill_worker"))
        at += kill_every_s
    return sorted(plan)


class Injector:
    """Strikes faults when due and records them; knows which servers are down right now."""

    def __init__(self, procs: FleetProcesses, home: Path, broker_url: str, *,
                 embedded_servers: bool, seed: int, clock: Callable[[], float]) -> None:
        self.procs = procs
        self.home = home
        self.broker_url = broker_url
        self.embedded = embedded_servers
        self.rng = random.Random(f"victims-{seed}")
        self.clock = clock
        self.records: list[FaultRecord] = []
        self.dropped_commands: dict[str, str] = {}  # task id -> where Redis held it, emptied
        self.dropped_steps = 0
        # (from, to) in run seconds: from the snapshot until Redis answered again. A command
        # accepted meanwhile went into a Redis about to be emptied (or not yet listening).
        self.redis_blackouts: list[tuple[float, float]] = []
        self._down: set[str] = set()
        self._lock = threading.Lock()
        self._queue: list[tuple[float, int, str, int]] = []  # (at, order, fault, pid)
        self._order = 0
        self.on_outage: Callable[[], None] = lambda: None

    def down(self) -> tuple[str, ...]:
        """The servers down at this moment (thread-safe, for the agent)."""
        with self._lock:
            return tuple(sorted(self._down))

    def _set_down(self, server: str, is_down: bool) -> None:
        with self._lock:
            (self._down.add if is_down else self._down.discard)(server)

    def plan(self, schedule: list[tuple[float, str]]) -> None:
        """Queue the schedule's faults."""
        for at, fault in schedule:
            self._push(at, fault, 0)

    def _push(self, at: float, fault: str, pid: int) -> None:
        self._order += 1
        heapq.heappush(self._queue, (at, self._order, fault, pid))

    def strike_due(self, *, everything: bool = False) -> None:
        """Strike every fault that is due (all remaining ones with ``everything``)."""
        while self._queue and (everything or self._queue[0][0] <= self.clock()):
            at, _, fault, pid = heapq.heappop(self._queue)
            time.sleep(max(0.0, at - self.clock()))  # only when striking everything
            self.strike(fault, pid)

    def strike(self, fault: str, pid: int = 0) -> None:
        """Strike one fault and record it."""
        record = FaultRecord(self.clock(), fault)
        self.records.append(record)
        try:
            getattr(self, f"_{fault}")(record, pid)
        except (IndexError, OSError, embedded.EmbeddedServerError) as exc:
            record.result = f"failed: {exc}"

    def _kill_worker(self, record: FaultRecord, _pid: int) -> None:
        victim = self.rng.choice(self.procs.live_workers())
        record.target = f"worker pid {victim.pid}"
        self.procs.killed.add(victim.pid)
        victim.kill()
        victim.wait()
        replacement = self.procs.spawn("worker")
        record.result = f"SIGKILL; replacement pid {replacement.pid}"

    def _sigstop_worker(self, record: FaultRecord, _pid: int) -> None:
        victim = self.rng.choice(self.procs.live_workers())
        record.target = f"worker pid {victim.pid}"
        victim.send_signal(signal.SIGSTOP)
        self.procs.stopped.add(victim.pid)
        self._push(self.clock() + STOP_PAST_LEASE_S, "sigcont_worker", victim.pid)
        record.result = f"SIGSTOP (lease {LEASE_S:.0f}s; SIGCONT in {STOP_PAST_LEASE_S:.0f}s)"

    def _sigcont_worker(self, record: FaultRecord, pid: int) -> None:
        record.target = f"worker pid {pid}"
        os.kill(pid, signal.SIGCONT)
        self.procs.stopped.discard(pid)
        record.result = "SIGCONT, past its lease"

    def _restart_redis(self, record: FaultRecord, _pid: int) -> None:
        record.target = "redis (embedded)"
        if not self.embedded:
            record.result = "skipped: external broker"
            return
        blackout_from = self.clock()
        held = snapshot(self.broker_url)  # what the restart is about to drop
        began = time.monotonic()
        embedded.stop_redis(self.home)
        self._set_down("redis", True)
        self.on_outage()
        time.sleep(REDIS_OUTAGE_S)
        embedded.start_redis(self.home)  # no persistence: every message is gone
        self._set_down("redis", False)
        self.redis_blackouts.append((blackout_from, self.clock()))
        record.outage_s = round(time.monotonic() - began, 2)
        self.dropped_commands.update({i: "queued" for i in held.queued})
        self.dropped_commands.update({i: "unacked, held by a worker" for i in held.unacked})
        self.dropped_steps += held.step_messages
        record.result = (f"stopped, started empty: dropped {len(held.command_ids)} command and "
                         f"{held.step_messages} step messages")

    def _restart_postgres(self, record: FaultRecord, _pid: int) -> None:
        record.target = "postgresql (embedded)"
        if not self.embedded:
            record.result = "skipped: external database"
            return
        began = time.monotonic()
        self._set_down("postgres", True)
        stopped = embedded.stop_postgres(self.home)
        self.on_outage()
        time.sleep(POSTGRES_OUTAGE_S)
        done = start_postgres_again(self.home)
        self._set_down("postgres", False)
        record.outage_s = round(time.monotonic() - began, 2)
        record.result = ("fast shutdown, started again" if stopped and done.returncode == 0
                         else f"restart failed: {done.stderr.strip()[:200]}")


def start_postgres_again(home: Path) -> subprocess.CompletedProcess[str]:
    """Start the stopped embedded cluster with the options it was first started with.

    ``postmaster.opts`` keeps the original command line (socket directory, settings), so
    the URL stays the same; the embedded package itself caches a started server per process
    and would not start it again. The same binaries and user as the embedded default's.
    """
    control = embedded.postgres_control(home)
    data_dir = control.data_dir
    original = shlex.split((data_dir / "postmaster.opts").read_text())[1:]
    options = [a for i, a in enumerate(original)
               if a != "-D" and (i == 0 or original[i - 1] != "-D")]
    return control.run("pg_ctl", "-D", str(data_dir), "-w", "-l", str(data_dir / "restart.log"),
                       "-o", shlex.join(options), "start")
