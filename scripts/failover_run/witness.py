"""The witness: which events the primary had acknowledged before it died.

An event is *acknowledged* once its transaction is visible to other sessions on the primary:
only then can any caller have been told it committed. (With synchronous replication a
commit becomes visible only after the standby confirmed it: PostgreSQL ends the transaction
in the process array after the wait for the standby, so "visible" implies "on the standby".)

The witness polls the primary on its own connection and keeps the id of every event it
saw. It never misses one: each poll reads, in one statement and so one snapshot, every event
whose transaction id is at or above the previous poll's ``xmin`` -- every transaction below
that had ended by the previous poll, and was read by it or before. The last poll runs just
before the primary is frozen (:meth:`Witness.last_look`); what commits between that poll and
the freeze (a few milliseconds) is not counted, so the figure is a floor.
"""

from __future__ import annotations

import threading
from collections import Counter
from uuid import UUID

import psycopg

_POLL = """
SELECT pg_snapshot_xmin(pg_current_snapshot())::text,
       event_id, event_type
  FROM (SELECT 1) AS one
  LEFT JOIN eventstore.events ON transaction_id >= %s::text::xid8
"""

POLL_EVERY_S = 0.05


class Witness(threading.Thread):
    """Polls one server (the primary) until :meth:`last_look`; ``seen`` maps each event id it
    saw to its type."""

    def __init__(self, url: str) -> None:
        super().__init__(name="witness", daemon=True)
        self.url = url
        self.seen: dict[UUID, str] = {}
        self.polls = 0
        self.errors = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._xmin = "0"
        self._conn: psycopg.Connection[object] | None = None

    def run(self) -> None:
        """Poll every :data:`POLL_EVERY_S` seconds until stopped."""
        while not self._done.wait(POLL_EVERY_S):
            self._poll()

    def _poll(self) -> None:
        with self._lock:
            if self._done.is_set() and self._conn is None:
                return
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.url, autocommit=True)
                rows = self._conn.execute(_POLL, (self._xmin,)).fetchall()
            except psycopg.Error:
                self.errors += 1
                return
            self.polls += 1
            for xmin, event_id, event_type in rows:
                self._xmin = xmin
                if event_id is not None:
                    self.seen[event_id] = event_type

    def last_look(self) -> None:
        """One last poll, then stop (called right before the primary is frozen)."""
        self._done.set()
        self._poll()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self.join(timeout=5)

    def by_type(self, ids: set[UUID]) -> dict[str, int]:
        """How many of ``ids`` are of each event type."""
        return dict(Counter(self.seen[i] for i in ids).most_common())
