"""Checkpointed, gap-safe followers of the global log, and the per-stream version gate.

A subscription reads below the snapshot horizon from its checkpoint and hands the caller a
batch inside an open transaction; the caller writes its read model on that connection and
the checkpoint advances in the same commit (exactly-once effects on the database). One
consumer per name holds a session advisory lock; NOTIFY only wakes, polling is the truth.

A lost connection (the server restarted, or failed over to a standby) takes the lock and the
``LISTEN`` with it: the next call opens a new connection, listens again, and must take the
lock again before it hands out a batch (its checkpoint is read inside the batch, so nothing
is skipped or applied twice). A server that refuses the checkpoint's write as read-only (a
demoted or fenced primary) is a failover too: the connection is dropped, the error is
``StoreUnavailable``. :attr:`Subscription.session` counts the connections, so a consumer
that keeps state beside its checkpoint can tell that it may now face another server.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import psycopg

from events.errors import CheckpointConflict, ReadOnlyStore, SubscriptionBusy, write_refused
from events.eventstore.driver import configure_connection, translated_errors
from events.eventstore.model import Position, RecordedEvent
from events.eventstore.prepare import MAX_STREAM_ID_LENGTH, check_name
from events.eventstore.reading import read_all_on, read_stream_on
from events.eventstore.waking import NOTIFY_CHANNEL


class SubscribedStore(Protocol):
    """What a subscription needs of the event store it follows (and checkpoints in)."""

    @property
    def conninfo(self) -> str:
        """The connection string for a dedicated connection."""

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled connection for one batch's transaction."""

    def read_all(self, after: Position | None = None, limit: int = 1000) -> list[RecordedEvent]:
        """A gap-safe page of the global log after ``after``."""


_ADVANCE = """
INSERT INTO eventstore.checkpoints AS c (name, last_xid, last_position, updated_at)
VALUES (%(name)s, %(xid)s::text::xid8, %(pos)s, now())
ON CONFLICT (name) DO UPDATE
   SET last_xid = EXCLUDED.last_xid, last_position = EXCLUDED.last_position, updated_at = now()
 WHERE (c.last_xid, c.last_position) < (EXCLUDED.last_xid, EXCLUDED.last_position)
RETURNING name
"""


_START_AT = """
INSERT INTO eventstore.checkpoints (name, last_xid, last_position, updated_at)
VALUES (%(name)s, %(xid)s::text::xid8, %(pos)s, now())
ON CONFLICT (name) DO NOTHING
RETURNING name
"""


def checkpoint_on(conn: psycopg.Connection[Any], name: str) -> Position | None:
    """The stored checkpoint of subscription ``name`` (None: it starts at the beginning)."""
    row = conn.execute(
        "SELECT last_xid::text, last_position FROM eventstore.checkpoints WHERE name = %s",
        (name,),
    ).fetchone()
    return Position(int(row[0]), int(row[1])) if row else None


class GateVerdict(enum.Enum):
    """What a consumer should do with an event given the last version it applied."""

    APPLY = "apply"
    DUPLICATE = "duplicate"
    GAP = "gap"


def stream_version_gate(last_version: int, event: RecordedEvent) -> GateVerdict:
    """``stream_version == last + 1`` applies; lower is a duplicate (skip); higher is a gap.

    On a gap the missing events are already committed (the head lock orders appends) but
    sit later in the global log because their writer's xid is higher. Either stop the batch
    before the event (``batch.stop_before``) and retry, or fetch them with
    ``batch.read_stream(stream_id, after_version=last)``, apply them, and later skip them
    as duplicates. Stopping only helps if the missing events come first on a re-read, so
    filling from the stream is the way that always makes progress.
    """
    if event.stream_version == last_version + 1:
        return GateVerdict.APPLY
    if event.stream_version <= last_version:
        return GateVerdict.DUPLICATE
    return GateVerdict.GAP


@dataclass
class Batch:
    """Events after the checkpoint, and the open transaction to write the read model in."""

    name: str
    events: list[RecordedEvent]
    connection: psycopg.Connection[Any]
    checkpoint: Position | None
    _stop: Position | None = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)

    def stop_before(self, event: RecordedEvent) -> None:
        """Advance the checkpoint only up to the event preceding ``event`` in this batch."""
        index = self.events.index(event)
        self._stop = self.events[index - 1].position if index else None
        self._stopped = True

    def read_stream(
        self, stream_id: str, after_version: int = 0, to_version: int | None = None
    ) -> list[RecordedEvent]:
        """Read a stream in this batch's transaction (to fill a gap the gate reported)."""
        with translated_errors():
            return read_stream_on(self.connection, stream_id, after_version, to_version)

    @property
    def advance_to(self) -> Position | None:
        """Where the checkpoint moves on a clean exit (None: it stays)."""
        if self._stopped:
            return self._stop
        return self.events[-1].position if self.events else None


class Subscription:
    """Follows the log from a stored checkpoint on one dedicated connection."""

    def __init__(
        self, store: SubscribedStore, name: str, *, log_from: SubscribedStore | None = None
    ) -> None:
        self.name = check_name("subscription name", name, MAX_STREAM_ID_LENGTH)
        self._store = store
        # Pages of the log may come from a standby: below its snapshot horizon they are as
        # final as on the primary, only later; the checkpoint moves on the primary.
        self._log_from = log_from
        self._conn: psycopg.Connection[Any] | None = None
        self._owner = False
        self.session = 0
        """How many connections this subscription has opened (a new one after each loss)."""
        self._woken = False  # a NOTIFY arrived since the last wait()
        # A stable 64-bit key per name (Python's hash() is salted per process).
        digest = hashlib.sha256(f"eventstore.subscription:{name}".encode()).digest()
        self._lock_key = int.from_bytes(digest[:8], "big", signed=True)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            with translated_errors():
                self._conn = psycopg.connect(self._store.conninfo, autocommit=True)
                configure_connection(self._conn)
                self._conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            # A new session holds no lock, whatever the lost one held.
            self._owner = False
            self.session += 1
        return self._conn

    @property
    def is_owner(self) -> bool:
        """Whether this consumer holds the subscription's exclusive lock."""
        return self._owner

    def try_acquire(self) -> bool:
        """Take the exclusive consumer lock if free (kept until :meth:`close`, or until the
        connection holding it is lost)."""
        conn = self._connection()
        if not self._owner:
            with translated_errors():
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self._lock_key,)).fetchone()
            self._owner = bool(row and row[0])
        return self._owner

    def checkpoint(self) -> Position | None:
        """The stored checkpoint (None: the subscription starts at the beginning)."""
        with translated_errors():
            return checkpoint_on(self._connection(), self.name)

    def start_at(self, position: Position) -> None:
        """Start this (new) subscription after ``position`` instead of at the beginning.

        For a consumer that already applied everything up to ``position`` some other way
        (a rebuild's bulk phase). A stored checkpoint is never moved: CheckpointConflict.
        """
        params = {
            "name": self.name,
            "xid": str(position.transaction_id),
            "pos": position.global_position,
        }
        with translated_errors(), self._store.connection() as conn:
            row = conn.execute(_START_AT, params).fetchone()
        if row is None:
            raise CheckpointConflict(f"subscription {self.name!r} already has a checkpoint")

    @contextmanager
    def next_batch(self, limit: int = 500) -> Iterator[Batch]:
        """Yield the next gap-safe batch in an open transaction; commit it with the checkpoint.

        On a clean exit the checkpoint moves forward to the batch's end (or to
        ``stop_before``) and everything commits together; on an exception all rolls back.
        Raises SubscriptionBusy when another consumer holds this subscription.
        """
        # The connection first: the lock taken next is held on this very connection.
        conn = self._connection()
        if not self.try_acquire():
            raise SubscriptionBusy(f"subscription {self.name!r} is held by another consumer")
        self._drain(conn)
        try:
            with translated_errors(), conn.transaction():
                start = self.checkpoint()
                page = (read_all_on(conn, start, limit) if self._log_from is None
                        else self._log_from.read_all(start, limit))
                batch = Batch(self.name, page, conn, start)
                yield batch
                target = batch.advance_to
                if target is not None and target != start:
                    self._advance(conn, target)
        except ReadOnlyStore as exc:
            self.close()  # this server no longer takes writes: find the one that does
            raise write_refused(exc) from exc

    def _advance(self, conn: psycopg.Connection[Any], target: Position) -> None:
        params = {
            "name": self.name,
            "xid": str(target.transaction_id),
            "pos": target.global_position,
        }
        if conn.execute(_ADVANCE, params).fetchone() is None:
            # Zero rows: the stored checkpoint is already at or past target. Roll back.
            raise CheckpointConflict(
                f"subscription {self.name!r}: checkpoint is already at or past {target}"
            )

    def _drain(self, conn: psycopg.Connection[Any]) -> None:
        """Take the NOTIFYs queued on the connection (one poll), remembering that one came.

        The driver keeps every notification that arrives while nobody waits; a consumer
        catching up on a long backlog would otherwise hold one per append in memory.
        """
        with translated_errors():
            for _ in conn.notifies(timeout=0):
                self._woken = True

    def wait(self, timeout: float) -> bool:
        """Block until a NOTIFY arrives or ``timeout`` seconds pass; True if notified."""
        conn = self._connection()
        self._drain(conn)
        if self._woken:
            self._woken = False
            return True
        with translated_errors():
            notified = any(True for _ in conn.notifies(timeout=timeout, stop_after=1))
        self._drain(conn)  # what queued up meanwhile: one poll reads all of it
        self._woken = False
        return notified

    def close(self) -> None:
        """Release the lock and the dedicated connection."""
        if self._conn is not None and not self._conn.closed:
            if self._owner and not self._conn.broken:
                # Unlock explicitly: the server notices a closed session only a moment
                # later, and a waiting copy should take over at once.
                with contextlib.suppress(psycopg.Error):
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_key,))
            self._conn.close()
        self._conn = None
        self._owner = False

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Notifications:
    """A dedicated connection LISTENing on :data:`NOTIFY_CHANNEL`: wakes a waiter on appends.

    Opened before the waiter first reads, so an append committed in between still wakes it.
    Only a wake-up, as for subscriptions: a store with ``notify`` off sends none, so a
    waiter must also look again on its own slow interval.
    """

    def __init__(self, store: SubscribedStore) -> None:
        with translated_errors():
            self._conn: psycopg.Connection[Any] = psycopg.connect(store.conninfo,
                                                                  autocommit=True)
            try:
                configure_connection(self._conn)
                self._conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            except BaseException:
                self._conn.close()
                raise

    def wait(self, timeout: float) -> bool:
        """Block until a NOTIFY arrives or ``timeout`` seconds pass; True if notified.

        What queued up meanwhile is drained too: one wake-up covers every append before it.
        """
        with translated_errors():
            notified = any(True for _ in self._conn.notifies(timeout=timeout, stop_after=1))
            for _ in self._conn.notifies(timeout=0):
                notified = True
        return notified

    def close(self) -> None:
        """Close the dedicated connection (its LISTEN ends with it)."""
        self._conn.close()

    def __enter__(self) -> Notifications:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
