"""Fixtures for the sandbox providers: a migrated fresh database and the trip tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from psycopg_pool import ConnectionPool

from sagafleet import sandbox
from sagafleet.sandbox import TripSandbox


@pytest.fixture
def sandbox_db(fresh_database: str) -> str:
    """A brand-new database with the sandbox installed (and nothing else)."""
    sandbox.install(fresh_database)
    return fresh_database


@pytest.fixture
def pool(sandbox_db: str) -> Iterator[ConnectionPool]:
    """A connection pool over the sandbox database, closed after the test."""
    with sandbox.open_pool(sandbox_db, max_size=8) as opened:
        yield opened


@pytest.fixture
def trip(pool: ConnectionPool) -> TripSandbox:
    """The four providers, their fault injector and the tool set of the eight trip tools."""
    return sandbox.build_trip_sandbox(pool)
