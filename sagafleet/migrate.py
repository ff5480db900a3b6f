"""Every room's schema migrations: applied by ``sagafleet db migrate`` and by the long-running
services at start-up, and checked (never applied) by every other command.

A command that only reads or records must not change a database's schema behind its
operator's back; on a database that is behind, it stops with :class:`DatabaseNotMigrated`,
which says to run ``sagafleet db migrate``.

The sandbox (a simulator for the demo and the tests) is no room of a real database: its
schemas come only from :func:`sagafleet.sandbox.install`, called by whoever sets it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

from events import EventStore, apply_migrations
from events.eventstore.postgres import MIGRATIONS_NAMESPACE
from events.migrate import MIGRATIONS_TABLE, discover
from saga_core.errors import ErrorKind, SagaError


class DatabaseNotMigrated(SagaError):
    """The database's schema is missing or behind this sagafleet; names what is pending."""

    kind = ErrorKind.MISCONFIGURED
    hint = "run `sagafleet db migrate` against this database, then call again"


@dataclass(frozen=True)
class Room:
    """One room's migrations: the namespace they are recorded under, and their folder."""

    namespace: str
    directory: Traversable | Path


# In the order they apply: the event store first, then the rooms that build on it.
ROOMS: Final = (
    Room(MIGRATIONS_NAMESPACE, files("events").joinpath("migrations")),
    Room("fleet", files("workers").joinpath("migrations")),
    Room("projections", files("projections").joinpath("migrations")),
    # Found from sagafleet, not sagafleet.console: importing the console's package (its app,
    # Celery, the fleet) would cost every command that checks the schema a second.
    Room("console", files("sagafleet").joinpath("console").joinpath("migrations")),
)
"""Every room whose schema ``sagafleet db migrate`` applies."""


def migrate_all(url: str) -> list[str]:
    """Apply all pending migrations; returns the names applied (empty when up to date)."""
    return [
        f"{room.namespace}/{name}"
        for room in ROOMS
        for name in apply_migrations(url, room.namespace, room.directory)
    ]


def pending_migrations(store: EventStore) -> list[str]:
    """The migrations ``migrate_all`` would apply to the store's database, without applying."""
    with store.connection() as conn:
        applied: set[tuple[str, int]] = set()
        if conn.execute("SELECT to_regclass(%s)", (MIGRATIONS_TABLE,)).fetchone() != (None,):
            applied = {
                (namespace, version)
                for namespace, version in conn.execute(
                    f"SELECT namespace, version FROM {MIGRATIONS_TABLE}"  # noqa: S608
                )
            }
    return [
        f"{room.namespace}/{migration.name}"
        for room in ROOMS
        for migration in discover(room.directory)
        if (room.namespace, migration.version) not in applied
    ]


def require_migrated(store: EventStore) -> None:
    """Raise :class:`DatabaseNotMigrated` unless every room's migrations are applied."""
    pending = pending_migrations(store)
    if pending:
        more = f" and {len(pending) - 3} more" if len(pending) > 3 else ""
        shown = ", ".join(pending[:3]) + more
        raise DatabaseNotMigrated(
            f"the database is not migrated ({shown} pending): run `sagafleet db migrate` first"
        )
