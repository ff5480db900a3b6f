"""Fixtures for the fleet: a migrated fresh database, a flushed Redis, real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fleet_support import redis_client

from saga_core.contracts import SagaStatus
from sagafleet.migrate import migrate_all
from workers.fleet import Fleet, FleetConfig
from workers.sandbox import FaultInjector
from workers.sweeper import Sweeper


@pytest.fixture
def database(fresh_database: str) -> str:
    """A fresh database with every room's migrations applied."""
    migrate_all(fresh_database)
    return fresh_database


@pytest.fixture
def broker(broker_url: str) -> Iterator[str]:
    """The test broker, emptied before and after the test."""
    client = redis_client(broker_url)
    client.flushdb()
    yield broker_url
    client.flushdb()
    client.close()


@pytest.fixture
def fleet(database: str, broker: str) -> Iterator[Fleet]:
    """A fleet object in the test process (client, sweeper, executor) with trip registered."""
    fleet = Fleet(FleetConfig(database_url=database, broker_url=broker, lease_s=3.0,
                              queue_wait_s=1.0, worker_id="test-process"))
    fleet.register_builtin_definitions()
    yield fleet
    fleet.close()


@pytest.fixture
def faults(fleet: Fleet) -> FaultInjector:
    """The sandbox's fault injector, empty."""
    injector = FaultInjector(fleet.sandbox_pool)
    injector.clear()
    return injector


class WorkerProcesses:
    """Real ``sagafleet worker`` processes on the test's database and broker."""

    def __init__(self, database: str, broker: str, log_dir: Path) -> None:
        self.database, self.broker, self.log_dir = database, broker, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1, *, tool_latency_s: float = 0.0,
              lease_s: float = 3.0) -> list[subprocess.Popen[bytes]]:
        env = dict(os.environ)
        env.update({
            "SAGAFLEET_DATABASE_URL": self.database,
            "SAGAFLEET_BROKER_URL": self.broker,
            "SAGAFLEET_TOOL_LATENCY_SECONDS": str(tool_latency_s),
            "SAGAFLEET_LEASE_SECONDS": str(lease_s),
            "SAGAFLEET_QUEUE_WAIT_SECONDS": "1",
        })
        started = []
        for _ in range(count):
            log = (self.log_dir / f"worker-{len(self.procs)}.log").open("wb")
            proc = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", "sagafleet", "worker"], env=env,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.procs.append(proc)
            started.append(proc)
        return started

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(database: str, broker: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Start real worker processes with ``workers.start(n)``; all are stopped afterwards."""
    processes = WorkerProcesses(database, broker, tmp_path)
    yield processes
    processes.stop()


Settled = Callable[..., SagaStatus]


@pytest.fixture
def sweeper(fleet: Fleet) -> Sweeper:
    """The test's sweeper (one per test: it holds the tracking subscription)."""
    return Sweeper(fleet)


@pytest.fixture
def wait_settled(fleet: Fleet, sweeper: Sweeper) -> Settled:
    """Wait (sweeping, as a sweeper process would) until a saga is terminal or paused."""

    def wait(saga_id: str, *, timeout: float = 60.0, sweep: bool = True,
             until: Callable[[SagaStatus], bool] | None = None) -> SagaStatus:
        done = until or (lambda s: s.is_terminal or s is SagaStatus.MANUAL_INTERVENTION)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = fleet.repo.load(saga_id).state.status
            if done(status):
                return status
            if sweep:
                sweeper.sweep()
            time.sleep(0.2)
        raise AssertionError(f"saga {saga_id} still {fleet.repo.load(saga_id).state.status}")

    return wait
