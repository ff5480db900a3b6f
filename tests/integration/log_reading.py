"""Reading the whole gap-safe log in tests: page through it, or poll until enough is there."""

from __future__ import annotations

import time

from events import EventStore, Position, RecordedEvent


def read_everything(store: EventStore, after: Position | None) -> list[RecordedEvent]:
    """Page through read_all from ``after`` (two events a page) until it returns nothing."""
    found: list[RecordedEvent] = []
    while page := store.read_all(after=after, limit=2):
        found.extend(page)
        after = page[-1].position
    return found


def read_until(
    store: EventStore, after: Position | None, want: int, *, within_s: float = 30.0
) -> list[RecordedEvent]:
    """Poll (the truth) until ``want`` events are readable past ``after`` or ``within_s``
    passed: other sessions on a shared server (or a standby's replay) may hold the horizon
    back for a while, which delays a read but never makes it skip."""
    deadline = time.monotonic() + within_s
    while True:
        found = read_everything(store, after)
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.02)
