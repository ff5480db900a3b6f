"""Fixtures for the event store on a real PostgreSQL: a migrated store per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from events import EventStore

pytestmark = pytest.mark.integration


@pytest.fixture
def store(fresh_database: str) -> Iterator[EventStore]:
    """A migrated event store on a brand-new database."""
    with EventStore.connect(fresh_database, pool_size=12) as opened:
        opened.migrate()
        yield opened


def _count_events(store: EventStore) -> int:
    with store.connection() as conn:
        row = conn.execute("SELECT count(*) FROM eventstore.events").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def count_events() -> Callable[[EventStore], int]:
    """How many events a store's log holds (all of them, regardless of the horizon)."""
    return _count_events
