"""Apply every room's schema migrations in order: the event store first, then the rest."""

from __future__ import annotations

from events import EventStore


def migrate_all(url: str) -> list[str]:
    """Apply all pending migrations; returns the names applied (empty when up to date)."""
    applied: list[str] = []
    with EventStore.connect(url) as store:
        applied.extend(store.migrate())
    return applied
