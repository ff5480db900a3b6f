"""The reliability fixtures, importable by the hostile-input and security conftests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_harness import WorkerProcesses, build_fleet, redis_client

from sagafleet.migrate import migrate_all
from workers.fleet import Fleet
from workers.sandbox import FaultInjector


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
    """The test process's fleet object (client, sweeper, log reader), trip registered."""
    fleet = build_fleet(database, broker)
    yield fleet
    fleet.close()


@pytest.fixture
def faults(fleet: Fleet) -> FaultInjector:
    """The sandbox's fault injector, empty."""
    injector = FaultInjector(fleet.sandbox_pool)
    injector.clear()
    return injector


@pytest.fixture
def workers(database: str, broker: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Start real worker processes with ``workers.start(n)``; all are stopped afterwards."""
    processes = WorkerProcesses(database, broker, tmp_path)
    yield processes
    processes.stop()
