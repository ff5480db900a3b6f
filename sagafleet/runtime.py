"""Resolve where the database and broker are: configured URLs, or the embedded servers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from projections import ProjectionContext
from sagafleet import embedded
from sagafleet.migrate import migrate_all, require_migrated
from sagafleet.settings import Settings, reveal


@dataclass(frozen=True)
class Endpoints:
    """The database and broker URLs a command uses, and whether each is embedded."""

    database_url: str
    broker_url: str | None
    embedded_database: bool
    embedded_broker: bool


def database_url(settings: Settings) -> str:
    """The configured database URL, or the embedded PostgreSQL's (started if needed)."""
    configured = reveal(settings.database_url)
    if configured is not None:
        return configured
    return embedded.start_postgres(settings.home).url


def broker_url(settings: Settings) -> str:
    """The configured broker URL, or the embedded Redis's (started if needed)."""
    configured = reveal(settings.broker_url)
    if configured is not None:
        return configured
    return embedded.start_redis(settings.home).url


def endpoints(settings: Settings, *, need_broker: bool) -> Endpoints:
    """Resolve both endpoints at once, starting only what the command needs."""
    return Endpoints(
        database_url=database_url(settings),
        broker_url=broker_url(settings) if need_broker else None,
        embedded_database=settings.embedded_database,
        embedded_broker=settings.embedded_broker,
    )


@contextmanager
def read_side(settings: Settings) -> Iterator[ProjectionContext]:
    """The log and read models of an already migrated database, for commands that only read
    or rebuild: no migration, no broker, no definitions registered."""
    with ProjectionContext.connect(database_url(settings)) as ctx:
        require_migrated(ctx.store)
        yield ctx


@contextmanager
def projector_side(settings: Settings) -> Iterator[ProjectionContext]:
    """The log and read models for a long-running projections service: migrated at start-up."""
    url = database_url(settings)
    migrate_all(url)
    with ProjectionContext.connect(url) as ctx:
        yield ctx
