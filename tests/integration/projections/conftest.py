"""Fixtures for projections on a real PostgreSQL: migrated database, context, repository."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from events.definition_store.postgres import DefinitionStore
from events.saga_log.postgres import PostgresSagaLog
from projections.context import ProjectionContext
from sagafleet.example_sagas import trip_definition

pytestmark = pytest.mark.integration


@pytest.fixture
def ctx(database: str) -> Iterator[ProjectionContext]:
    """A projection context with the trip definition registered."""
    with ProjectionContext.connect(database, pool_size=6) as opened:
        opened.definitions.register_shared(trip_definition())
        yield opened


@pytest.fixture
def repo(ctx: ProjectionContext) -> PostgresSagaLog:
    """Appends saga events straight into the log."""
    return PostgresSagaLog(ctx.store, DefinitionStore(ctx.store))
