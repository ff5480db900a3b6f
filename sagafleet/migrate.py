"""Apply every room's schema migrations in order: the event store first, then the rest.

The sandbox (a simulator for the demo and the tests) is no room of a real database: its
schemas come only from :func:`sagafleet.sandbox.install`, called by whoever sets it up.
"""

from __future__ import annotations

from importlib.resources import files

from events import EventStore, apply_migrations
from projections.context import migrate as projections_migrate


def migrate_all(url: str) -> list[str]:
    """Apply all pending migrations; returns the names applied (empty when up to date)."""
    applied: list[str] = []
    with EventStore.connect(url, pool_size=1) as store:
        applied.extend(f"events/{name}" for name in store.migrate())
    applied.extend(
        f"fleet/{name}"
        for name in apply_migrations(url, "fleet", files("workers").joinpath("migrations"))
    )
    applied.extend(f"projections/{name}" for name in projections_migrate(url))
    return applied
