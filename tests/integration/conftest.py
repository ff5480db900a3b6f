"""Fixtures of every integration test that runs a real fleet: a migrated fresh database, a
flushed Redis, the test process's fleet object, the fault injector, real worker processes,
and a sweeper-driven wait for settlement (see fleet_harness.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fleet_harness import (
    SandboxFleet,
    WorkerProcesses,
    build_fleet,
    install_everything,
    is_settled,
    redis_client,
)

from saga_core.contracts import SagaStatus
from sagafleet.sandbox import FaultInjector
from workers.fleet import Fleet
from workers.sweeper import Sweeper


@pytest.fixture
def database(fresh_database: str) -> str:
    """A fresh database with every room's migrations applied, and the sandbox installed."""
    install_everything(fresh_database)
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
def fleet(database: str, broker: str) -> Iterator[SandboxFleet]:
    """The test process's fleet object (client, sweeper, log reader), trip registered."""
    fleet = build_fleet(database, broker)
    yield fleet
    fleet.close()


@pytest.fixture
def faults(fleet: SandboxFleet) -> FaultInjector:
    """The sandbox's fault injector, empty."""
    injector = fleet.sandbox.faults
    injector.clear()
    return injector


@pytest.fixture
def workers(database: str, broker: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Start real worker processes with ``workers.start(n)``; all are stopped afterwards."""
    processes = WorkerProcesses(database, broker, tmp_path)
    yield processes
    processes.stop()


@pytest.fixture
def sweeper(fleet: Fleet) -> Sweeper:
    """The test's sweeper (one per test: it holds the tracking subscription)."""
    return Sweeper(fleet)


Settled = Callable[..., SagaStatus]


@pytest.fixture
def wait_settled(fleet: Fleet, sweeper: Sweeper) -> Settled:
    """Wait (sweeping, as a sweeper process would) until a saga is terminal or paused."""

    def wait(saga_id: str, *, timeout: float = 60.0, sweep: bool = True,
             until: Callable[[SagaStatus], bool] | None = None) -> SagaStatus:
        done = until or is_settled
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
