"""A real fleet for the reliability, hostile-input and security tests.

Worker processes are real ``sagafleet worker`` subprocesses on real PostgreSQL and Redis,
running the trip sandbox's tools (``SAGAFLEET_TOOLS``: there is no default tool set);
the test process plays the sweeper (a :class:`~workers.sweeper.Sweeper` on its own fleet
object) and reads the providers' ledgers. Imported by file name (tests are not a package).

:class:`AfterCommitFreeze` is how a test kills a worker *after* the provider committed and
*before* the worker persisted the receipt, without any timing window: it arms a fault rule
that never fires at ``commit_then_timeout`` and holds, in an open transaction, the row that
rule's evaluation must insert. The provider commits its effect, then its fault check blocks
on that row; the test sees the committed effect, SIGKILLs the worker, and lets go.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from application.messages import StepCommand
from application.orchestrator import Clock, utc_now
from events.saga_log.port import LoadedSaga
from saga_core import due_work
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import SagaEvent, StepStarted
from saga_core.engine.state import RunStatus
from sagafleet import sandbox
from sagafleet.example_sagas.registration import register_trip
from sagafleet.migrate import migrate_all
from sagafleet.processes import spawn_sagafleet, stop_processes
from sagafleet.sandbox import ConnectionSource, FaultInjector, TripSandbox
from workers.celery_app import broker_redis
from workers.fleet import Fleet, FleetConfig
from workers.sweeper import Sweeper

LEASE_S = 2.0
QUEUE_WAIT_S = 1.0

# (provider, operation, ledger schema) of each trip step's forward and compensation tool.
TRIP_TOOLS: dict[tuple[str, StepKind], tuple[str, str]] = {
    ("hold_flight", StepKind.FORWARD): ("flights", "hold"),
    ("hold_flight", StepKind.COMPENSATION): ("flights", "release"),
    ("hold_hotel", StepKind.FORWARD): ("hotels", "hold"),
    ("hold_hotel", StepKind.COMPENSATION): ("hotels", "release"),
    ("capture_payment", StepKind.FORWARD): ("payments", "capture"),
    ("capture_payment", StepKind.COMPENSATION): ("payments", "refund"),
    ("send_itinerary", StepKind.FORWARD): ("email", "send_itinerary"),
    ("send_itinerary", StepKind.COMPENSATION): ("email", "send_correction"),
}


# Tests import it from here under their own name.
redis_client = broker_redis


def with_dbname(url: str, dbname: str) -> str:
    """The same server URL pointing at another database."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo("", **params)


@contextmanager
def migrated_database(server_url: str) -> Iterator[str]:
    """A brand-new migrated database (for fixtures wider than one test); dropped afterwards."""
    name = f"sf_rel_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_dbname(server_url, name)
    try:
        install_everything(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def install_everything(database: str) -> None:
    """The fleet's migrations and, set up explicitly as a test must, the sandbox's schemas."""
    migrate_all(database)
    sandbox.install(database)


def worker_env(database: str, broker: str, *, tool_latency_s: float = 0.0,
               lease_s: float = LEASE_S) -> dict[str, str]:
    """Environment of a spawned sagafleet process on the test's database and broker."""
    env = dict(os.environ)
    env.update({
        "SAGAFLEET_DATABASE_URL": database,
        "SAGAFLEET_BROKER_URL": broker,
        "SAGAFLEET_TOOL_LATENCY_SECONDS": str(tool_latency_s),
        "SAGAFLEET_LEASE_SECONDS": str(lease_s),
        "SAGAFLEET_QUEUE_WAIT_SECONDS": str(QUEUE_WAIT_S),
        "SAGAFLEET_SWEEP_INTERVAL_SECONDS": "0.5",
        "SAGAFLEET_TOOLS": sandbox.TOOL_SET,
    })
    return env


class WorkerProcesses:
    """Real ``sagafleet worker`` processes; stopped (warm, then SIGKILL) at the end."""

    def __init__(self, database: str, broker: str, log_dir: Path) -> None:
        self.database, self.broker, self.log_dir = database, broker, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1, *, tool_latency_s: float = 0.0,
              lease_s: float = LEASE_S, extra_env: dict[str, str] | None = None,
              args: tuple[str, ...] = ()) -> list[subprocess.Popen[bytes]]:
        """Spawn ``count`` workers (``extra_env``: more SAGAFLEET_* settings, ``args``: more
        ``sagafleet worker`` options); return them."""
        env = worker_env(self.database, self.broker, tool_latency_s=tool_latency_s,
                         lease_s=lease_s) | (extra_env or {})
        started = []
        for _ in range(count):
            proc = spawn_sagafleet(["worker", *args], env,
                                   self.log_dir / f"worker-{len(self.procs)}.log")
            self.procs.append(proc)
            started.append(proc)
        return started

    def by_pid(self, pid: int) -> subprocess.Popen[bytes] | None:
        """The worker process with this pid, if it is one of ours."""
        return next((p for p in self.procs if p.pid == pid), None)

    def alive(self) -> list[subprocess.Popen[bytes]]:
        """Workers still running."""
        return [p for p in self.procs if p.poll() is None]

    def stop(self) -> None:
        """Warm shutdown, then SIGKILL whatever is left."""
        stop_processes(self.procs)


class SandboxFleet(Fleet):
    """A fleet on the trip sandbox's tools, with the sandbox at hand for the test's checks."""

    def __init__(self, config: FleetConfig, *, clock: Clock = utc_now) -> None:
        self.sandbox: TripSandbox = sandbox.open_trip_sandbox(config.database_url)
        super().__init__(config, self.sandbox.tools, clock=clock)

    @property
    def sandbox_pool(self) -> ConnectionSource:
        """Where the providers' ledgers and fault rules are (for ledger_for_saga and co)."""
        return self.sandbox.db


def build_fleet(database: str, broker: str, worker_id: str = "test-process") -> SandboxFleet:
    """The test process's own fleet object (client, sweeper, log reader), trip registered."""
    fleet = SandboxFleet(FleetConfig(database_url=database, broker_url=broker, lease_s=LEASE_S,
                                     queue_wait_s=QUEUE_WAIT_S, worker_id=worker_id))
    register_trip(fleet)
    return fleet


def is_settled(status: SagaStatus) -> bool:
    """Terminal, or paused for a human."""
    return status.is_terminal or status is SagaStatus.MANUAL_INTERVENTION


def events_of(fleet: Fleet, saga_id: str) -> list[SagaEvent]:
    """The saga's journal, oldest first."""
    return list(fleet.repo.load_history(saga_id).events)


def settle(fleet: Fleet, saga_ids: list[str], *, timeout: float = 120.0,
           on_tick: Callable[[], None] | None = None,
           parked: Callable[[LoadedSaga], bool] | None = None) -> dict[str, SagaStatus]:
    """Sweep (as a sweeper process would) until every saga is settled; return the states.

    A saga for which ``parked`` says yes counts as settled too (left waiting, say, for a
    commit horizon that the test then crosses with a shifted clock). ``timeout`` only
    bounds a hung run; nothing is asserted about how long it took.
    """
    sweeper = Sweeper(fleet)
    deadline = time.monotonic() + timeout
    pending = set(saga_ids)
    states: dict[str, SagaStatus] = {}
    while pending:
        if on_tick is not None:
            on_tick()
        for saga_id in list(pending):
            loaded = fleet.repo.load(saga_id)
            status = loaded.state.status
            if is_settled(status) or (parked is not None and parked(loaded)):
                states[saga_id] = status
                pending.discard(saga_id)
        if not pending:
            break
        if time.monotonic() > deadline:
            stuck = {s: str(fleet.repo.load(s).state.status) for s in pending}
            raise AssertionError(f"sagas never settled: {stuck}")
        sweeper.sweep()
        time.sleep(0.1)
    return states


def track_until(sweeper: Sweeper, count: int, timeout: float = 60.0) -> None:
    """Let the sweeper's tracker see ``count`` new sagas: it reads below the snapshot
    horizon, which another session's open transaction on a shared server holds back.
    ``timeout`` only bounds a hung run."""
    seen, deadline = 0, time.monotonic() + timeout
    while seen < count:
        assert time.monotonic() < deadline, f"the tracker saw {seen} of {count} sagas"
        seen += sweeper.track()
        time.sleep(0.05)


def shifted_fleet(database: str, broker: str, ahead: timedelta) -> SandboxFleet:
    """A fleet in the test process whose clock runs ``ahead`` of the real one."""
    return SandboxFleet(FleetConfig(database_url=database, broker_url=broker, lease_s=LEASE_S,
                                    queue_wait_s=QUEUE_WAIT_S, worker_id="time-traveller"),
                        clock=lambda: utc_now() + ahead)


def drive(fleet: Fleet, saga_id: str, *, max_rounds: int = 200) -> SagaStatus:
    """Run a saga to settlement in this process, on ``fleet``'s clock, without the broker."""
    for _ in range(max_rounds):
        loaded = fleet.repo.load(saga_id)
        if is_settled(loaded.state.status):
            return loaded.state.status
        items = due_work(loaded.state, fleet.clock(), timedelta(0))
        for item in items:
            if item.action in ("execute", "reconcile") and item.step_id and item.kind:
                command = StepCommand(saga_id=saga_id, step_id=item.step_id, kind=item.kind,
                                      attempt=item.attempt)
                fleet.executor.handle(command)
            else:
                fleet.orchestrator.advance(saga_id)
        if not items:
            time.sleep(0.05)
    raise AssertionError(f"saga {saga_id} did not settle: {fleet.repo.load(saga_id).state.status}")


def drive_until_it_asks(fleet: Fleet, saga_id: str, *, max_rounds: int = 100) -> None:
    """Run a saga in this process (as :func:`drive`) until it waits for a person's approval."""
    for _ in range(max_rounds):
        state = fleet.repo.load(saga_id).state
        if any(run.status is RunStatus.AWAITING_APPROVAL
               for run in [*state.forward.values(), *state.compensation.values()]):
            return
        for item in due_work(state, fleet.clock(), timedelta(0)):
            if item.action in ("execute", "reconcile") and item.step_id and item.kind:
                fleet.executor.handle(StepCommand(saga_id=saga_id, step_id=item.step_id,
                                                  kind=item.kind, attempt=item.attempt))
            else:
                fleet.orchestrator.advance(saga_id)
    raise AssertionError(f"saga {saga_id} never asked for an approval")


class AfterCommitFreeze:
    """Stall a worker right after a provider committed one operation, to kill it there."""

    def __init__(self, fleet: Fleet, faults: FaultInjector, saga_id: str, step_id: str,
                 kind: StepKind) -> None:
        self.fleet, self.saga_id, self.step_id, self.kind = fleet, saga_id, step_id, kind
        provider, operation = TRIP_TOOLS[(step_id, kind)]
        self.schema = f"sandbox_{provider}"
        self.key = fleet.repo.load(saga_id).state.run(step_id, kind).operation_key
        rule = faults.add(provider, operation, "commit_then_timeout", saga_id=saga_id,
                          probability=0.0, seed="freeze")
        # The open transaction owns (rule, key): the worker's fault check waits on it.
        self._conn: psycopg.Connection[Any] | None = psycopg.connect(fleet.config.database_url)
        self._conn.execute(
            "INSERT INTO sandbox_control.fault_draws (rule_id, op_key, draws) VALUES (%s, %s, 0)",
            (rule, self.key),
        )
        self.killed_pid: int | None = None

    @property
    def holding(self) -> bool:
        """Whether the freeze still holds (no worker killed yet)."""
        return self._conn is not None

    def effect_committed(self) -> bool:
        """Whether the provider's effect (its idempotency key row) is committed."""
        with psycopg.connect(self.fleet.config.database_url, autocommit=True) as conn:
            row = conn.execute(
                sql.SQL("SELECT 1 FROM {}.idempotency_keys WHERE key = %s").format(
                    sql.Identifier(self.schema)),
                (self.key,),
            ).fetchone()
        return row is not None

    def claimant_pid(self) -> int:
        """The pid of the worker that claimed the frozen operation (from its StepStarted)."""
        claims = [e for e in events_of(self.fleet, self.saga_id)
                  if isinstance(e, StepStarted) and e.step_id == self.step_id
                  and e.kind is self.kind]
        assert claims, "the frozen operation was never claimed"
        return int(claims[-1].worker_id.rsplit(":", 1)[1])

    def kill_if_frozen(self, workers: WorkerProcesses) -> bool:
        """Once the effect is committed: SIGKILL its worker, let go, start a replacement."""
        if self._conn is None or not self.effect_committed():
            return False
        pid = self.claimant_pid()
        victim = workers.by_pid(pid)
        assert victim is not None, f"claimant {pid} is not one of the test's workers"
        victim.kill()
        victim.wait()
        self.killed_pid = pid
        self.release()
        workers.start(1)
        return True

    def release(self) -> None:
        """Let go of the held row (rolled back)."""
        if self._conn is not None:
            self._conn.rollback()
            self._conn.close()
            self._conn = None
