"""The PostgreSQL event store: append with optimistic concurrency, read, subscribe.

Decisions worth knowing:

* Idempotency wins over the version check: re-appending events whose ids are stored
  returns the first attempt's result (``duplicate=True``) even when the expected version is
  stale by now, because the first attempt is exactly what moved the stream. The lookup only
  runs when an append fails and the caller supplied event ids, so the happy path pays
  nothing. Same id with other content, or a batch mixing stored and new ids, is
  :class:`EventIdConflict`.
* ``NO_STREAM`` means "version 0": there is no stream deletion, so no empty stream exists.
* Appends inside a caller's transaction run in a savepoint: a conflict leaves that
  transaction usable. The head lock is then the first xid-assigning statement of the
  *append*, not necessarily of the caller's transaction; consumers keep the version gate.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib.resources import files
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

import psycopg
from psycopg.abc import Buffer
from psycopg.pq import TransactionStatus
from psycopg.types.datetime import TimestamptzLoader
from psycopg_pool import ConnectionPool
from pydantic import BaseModel

from events.errors import (
    ConcurrencyError,
    EventIdConflict,
    ReadOnlyStore,
    write_refused,
)
from events.eventstore.appending import run_append
from events.eventstore.driver import configure_connection, recorded_event_row, translated_errors
from events.eventstore.hashing import HASH_VERSION
from events.eventstore.lending import ConnectionLender
from events.eventstore.model import (
    ANY,
    EARLIEST,
    KEEP_DUE,
    AppendResult,
    Clock,
    DueStream,
    DueTime,
    ExpectedVersion,
    NewEvent,
    Position,
    RecordedEvent,
    ScannedEvent,
    append_result,
    utc_now,
)
from events.eventstore.prepare import DEFAULT_MAX_EVENT_BYTES, PreparedEvent, prepare_events
from events.eventstore.reading import (
    checked_stream_id,
    events_by_id_on,
    horizon_on,
    read_all_on,
    read_stream_on,
    read_streams_on,
    scan_streams_on,
)
from events.eventstore.rules import expected_code, new_events, original_append
from events.eventstore.subscription import Subscription, checkpoint_on
from events.eventstore.traces import events_of_trace_on
from events.eventstore.waking import AfterCommitNotifier
from events.migrate import apply_migrations
from saga_core.limits import TRACE_EVENTS

if TYPE_CHECKING:
    from events.eventstore.registry import EventRegistry

MIGRATIONS_NAMESPACE: Final = "events"
"""The namespace under which the event store's own migration files are recorded."""


@dataclass
class UnitOfWork:
    """One open transaction on one connection: append events and write your own rows."""

    store: EventStore
    connection: psycopg.Connection[Any]
    savepoints: bool = True
    """Whether each append runs in a savepoint (see :meth:`EventStore.transaction`)."""
    appended: bool = field(default=False, init=False)
    """Whether an append ran in it (its commit then wakes subscribers)."""

    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion = ANY,
        *,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append inside this transaction; it commits (or not) with everything else."""
        result = self.store._append(stream_id, events, expected_version, conn=self.connection,
                                    due_at=due_at, notify=self.store._notify_in_commit,
                                    unit=self)
        self.appended = True
        return result


# Oldest due first from the partial index on due_at; the prefix is a filter on the rows the
# range yields (the due streams are few, whatever the number of streams).
_DUE_STREAMS: Final = """
SELECT stream_id, version, due_at FROM eventstore.streams
 WHERE due_at <= %s AND starts_with(stream_id, %s)
 ORDER BY due_at LIMIT %s
"""

_DUE_STREAMS_SINCE: Final = """
SELECT stream_id, version, due_at FROM eventstore.streams
 WHERE due_at > %s AND due_at <= %s AND starts_with(stream_id, %s)
 ORDER BY due_at LIMIT %s
"""

# One JSON document, not three arrays: psycopg dumps arrays element by element, which cost
# a sweeper's chunk more client CPU than the server's update.
_DEFER_DUE: Final = """
UPDATE eventstore.streams s SET due_at = (d ->> 2)::timestamptz
  FROM jsonb_array_elements(%s::jsonb) AS d
 WHERE s.stream_id = d ->> 0 AND s.version = (d ->> 1)::bigint
"""


class _DueTimeLoader(TimestamptzLoader):
    """Reads ``-infinity`` (a head due before anything else: migration 0009's backfill) as
    ``EARLIEST``; psycopg refuses it as out of range otherwise."""

    def load(self, data: Buffer) -> datetime:
        if bytes(data) == b"-infinity":
            return EARLIEST
        return super().load(data)


MAX_REMEMBERED_STREAMS: Final = 1024
"""How many streams' latest (version, hash) an EventStore keeps for computed appends."""


class EventStore:
    """Append-only event log in PostgreSQL (schema ``eventstore``) behind a connection pool."""

    writes: bool = True
    """Whether this store may write (a read-only store on a standby may not)."""

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        conninfo: str,
        notify: bool = True,
        notify_in_commit: bool = False,
        registry: EventRegistry | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        clock: Clock = utc_now,
    ) -> None:
        """``notify``, ``notify_in_commit``: see :meth:`connect`. ``clock``: what tells an
        append the time its events are recorded at (which their hashes cover); the machine's
        UTC clock unless a test fixes it."""
        self._pool = pool
        self._clock = clock
        self._lender = ConnectionLender(pool, drops_read_only=self.writes)
        self._conninfo = conninfo
        self._notify = notify
        # In each append's statement (the plain path), or once after commits.
        self._notify_in_commit = notify and notify_in_commit
        self._notifier = (AfterCommitNotifier(conninfo) if notify and not notify_in_commit
                          else None)
        self.registry = registry
        self._max_event_bytes = max_event_bytes
        # stream -> (a committed version, its event hash), from this store's own appends
        # and reads: a fact that never goes stale. An append expecting that version sends
        # its chain computed (events.eventstore.appending): for 100 events ~7-9% faster than the
        # server-side chain in the same run; for one event about the same.
        self._hashes: dict[str, tuple[int, str]] = {}
        self._hashes_lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        timeout: float = 10.0,
        notify: bool = True,
        notify_in_commit: bool = False,
        registry: EventRegistry | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        clock: Clock = utc_now,
    ) -> Self:
        """Open a store on a DSN or conninfo; no DDL here (see :meth:`migrate`).

        ``notify`` wakes subscribers after appends (``pg_notify``); off, they only poll.
        By default one NOTIFY goes out after the appends' commits, from a thread and a
        connection of the store's own (:mod:`events.eventstore.waking`: commits that
        notified take turns at PostgreSQL's notification queue, those that did not share
        WAL flushes). ``notify_in_commit`` sends it inside each append's transaction instead
        (the plain path). An append on a caller's connection (``append(conn=...)``) always
        notifies inside that transaction, whose commit the store does not see.
        ``clock``: see :meth:`__init__`.
        """
        pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            timeout=timeout,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout))},
            configure=configure_connection,
            open=True,
            name="eventstore",
        )
        return cls(
            pool,
            conninfo=url,
            notify=notify,
            notify_in_commit=notify_in_commit,
            registry=registry,
            max_event_bytes=max_event_bytes,
            clock=clock,
        )

    @property
    def conninfo(self) -> str:
        """The connection string this store uses (for dedicated connections)."""
        return self._conninfo

    def close(self) -> None:
        """Close the pool; the store cannot be used afterwards."""
        if self._notifier is not None:
            self._notifier.close()
        self._lender.close()
        self._pool.close()

    def wake_ups_sent(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds until the wake-ups of this store's appends so far
        went out (:mod:`events.eventstore.waking` sends them after the commits, from a
        thread); True if none is left. A listener opened after it hears of none of them
        (``PostgresSagaLog.watch`` waits on it; so do tests that need an idle log)."""
        return self._notifier is None or self._notifier.settled(timeout)

    def __enter__(self) -> EventStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def migrate(self) -> list[str]:
        """Apply the event store's SQL migrations (idempotent); return those newly applied."""
        return apply_migrations(
            self.conninfo, MIGRATIONS_NAMESPACE, files("events").joinpath("migrations")
        )

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a pooled (autocommit) connection for the caller's own queries.

        On a writing store, a write the server refuses as read-only (a standby, a demoted or
        fenced primary: a failover under way) is :class:`StoreUnavailable`, and the
        connection is dropped so that the next one reaches the server that takes writes."""
        try:
            with translated_errors(), self._lender.loan() as conn:
                yield conn
        except ReadOnlyStore as exc:
            if self.writes:
                raise write_refused(exc) from exc
            raise

    @contextmanager
    def transaction(
        self, *, pipelined: bool = False, savepoints: bool = True
    ) -> Iterator[UnitOfWork]:
        """A transaction on a pooled connection: commit on clean exit, roll back on error.

        ``pipelined`` runs it in pipeline mode: statements are sent when a result is
        needed, so BEGIN, your writes and an append travel in one round trip and the
        append's savepoint release rides with COMMIT. Errors then surface at the next
        fetch (or at the end of the block), still before anything commits; use it when
        you do not read results between writes.

        ``savepoints``: each append runs in a savepoint, so a conflict fails only that
        append and the transaction goes on (an append that repeats stored event ids then
        returns the original). ``False`` is for a unit that lets every error end it: a
        failed append fails the transaction, and the SAVEPOINT and RELEASE around each
        append (two statements) are not sent; an append that gives event ids still runs in
        a savepoint, for its replay.
        """
        with self.connection() as conn:
            unit = UnitOfWork(self, conn, savepoints)
            if not pipelined:
                with conn.transaction():
                    yield unit
            else:
                # BEGIN and COMMIT as queued statements: psycopg's transaction() syncs before
                # its COMMIT, which would add a round trip to the two this needs.
                with conn.pipeline() as pipeline:
                    conn.execute("BEGIN")
                    try:
                        yield unit
                    except BaseException:
                        # A failed statement left the pipeline aborted until a Sync (which
                        # reports the statements skipped behind it): resume, then roll back.
                        with contextlib.suppress(psycopg.Error):
                            pipeline.sync()
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
        if unit.appended and self._notifier is not None:  # committed now
            self._notifier.wake()

    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion = ANY,
        *,
        conn: psycopg.Connection[Any] | None = None,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append events to one stream if it is at ``expected_version``.

        With ``conn`` the append joins the caller's transaction (inside a savepoint, so a
        conflict leaves that transaction usable). Retrying events whose ids are stored
        returns the original result even if ``expected_version`` is now stale: the first
        attempt succeeded, so idempotency wins over the version check. ``due_at`` sets the
        stream's due time in the same statement (None clears it; see :meth:`due_streams`);
        by default it stays as it is.
        """
        if conn is not None:
            return self._append(stream_id, events, expected_version, conn=conn, due_at=due_at,
                                notify=self._notify)
        result = self._append(stream_id, events, expected_version, conn=None, due_at=due_at,
                              notify=self._notify_in_commit)
        if self._notifier is not None:  # committed now
            self._notifier.wake()
        return result

    def _append(
        self,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion,
        *,
        conn: psycopg.Connection[Any] | None,
        due_at: DueTime,
        notify: bool,
        unit: UnitOfWork | None = None,
    ) -> AppendResult:
        """:meth:`append`, notifying in the append's statement or not; on a caller's
        ``conn``, or its ``unit``'s (in a savepoint unless the unit sends none,
        :meth:`transaction`)."""
        envelopes = new_events(self.registry, events)
        prepared = prepare_events(stream_id, envelopes, self._max_event_bytes, self._clock())
        if conn is not None:
            if unit is not None:  # the unit's open transaction (in pipeline mode its status
                # may read idle): a savepoint unless it sends none, or a replay needs one
                savepoint = unit.savepoints or any(event.id_was_given for event in prepared)
            else:  # a caller's connection: an autocommit one found idle has none to join
                savepoint = not (conn.autocommit
                                 and conn.info.transaction_status == TransactionStatus.IDLE)
            return self._append_on(conn, stream_id, prepared, expected_version, notify,
                                   savepoint=savepoint, due=due_at)
        # As connection() lends it, without the generator around the loan.
        try:
            with translated_errors(), self._lender.loan() as own:
                appended = self._append_on(own, stream_id, prepared, expected_version,
                                           notify, savepoint=False, due=due_at)
        except ReadOnlyStore as exc:
            raise write_refused(exc) from exc
        if not appended.duplicate:  # committed now (a caller's transaction may still roll back)
            self._remember(stream_id, appended.events[-1])
        return appended

    def _append_on(
        self,
        conn: psycopg.Connection[Any],
        stream_id: str,
        prepared: list[PreparedEvent],
        expected_version: ExpectedVersion,
        notify: bool,
        *,
        savepoint: bool,
        due: DueTime,
    ) -> AppendResult:
        """The append on ``conn``: alone (autocommit) or in the caller's transaction, in a
        ``savepoint`` or not; the original append when these events repeat one."""
        expected = expected_code(expected_version)
        known = self._hashes.get(stream_id)
        tip = known[1] if known is not None and known[0] == expected else None
        try:
            # The caller's transaction, or the implicit one of an autocommit statement.
            with translated_errors(stream_id, expected_version):
                rows = run_append(
                    conn, stream_id, expected, prepared, notify,
                    savepoint=savepoint, tip=tip, due=due,
                )
        except (ConcurrencyError, EventIdConflict):
            original = _original_append_on(conn, stream_id, prepared)
            if original is None:
                raise
            return original
        recorded = (
            (_recorded(stream_id, prepared[0], rows[0]),) if len(prepared) == 1
            else tuple(_recorded(stream_id, event, row)
                       for event, row in zip(prepared, rows, strict=True))
        )
        return append_result(stream_id, recorded[-1].stream_version, recorded)

    def read_stream(
        self, stream_id: str, *, after_version: int = 0, to_version: int | None = None
    ) -> list[RecordedEvent]:
        """A stream's events in version order (all of them by default)."""
        with self.connection() as conn:
            found = read_stream_on(conn, stream_id, after_version, to_version)
        if found:
            self._remember(stream_id, found[-1])
        return found

    def events_of_trace(
        self, tenant: str, trace_id: str, *, limit: int = TRACE_EVENTS.value
    ) -> list[RecordedEvent]:
        """The tenant's events recorded under a saga lineage trace id, oldest first (at
        most ``limit``): every event of the sagas that trace started."""
        with self.connection() as conn:
            return events_of_trace_on(conn, tenant, trace_id, limit)

    def read_streams(self, stream_ids: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several whole streams in one query (at most ``MAX_STREAMS_PER_READ`` ids): each
        id to its events in version order, an empty list for a stream with none."""
        with self.connection() as conn:
            return read_streams_on(conn, stream_ids)

    def remember_head(self, stream_id: str, event: RecordedEvent) -> None:
        """Note a stream's latest event that another query read (``events.saga_log.snapshots``), as
        :meth:`read_stream` notes its own, so the next append sends its chain computed."""
        self._remember(stream_id, event)

    def _remember(self, stream_id: str, event: RecordedEvent) -> None:
        """Keep a stream's latest known (version, hash), so that an append expecting that
        version can send its chain computed (bounded: the oldest streams are forgotten)."""
        with self._hashes_lock:
            self._hashes.pop(stream_id, None)
            self._hashes[stream_id] = (event.stream_version, event.event_hash)
            if len(self._hashes) > MAX_REMEMBERED_STREAMS:
                del self._hashes[next(iter(self._hashes))]

    def read_all(self, after: Position | None = None, limit: int = 1000) -> list[RecordedEvent]:
        """A gap-safe page of the global log after ``after`` (None: from the start)."""
        with self.connection() as conn:
            return read_all_on(conn, after, limit)

    def stream_version(self, stream_id: str) -> int:
        """The stream's current version; 0 when it has no events."""
        checked_stream_id(stream_id)
        with self.connection() as conn:
            row = conn.execute(
                "SELECT version FROM eventstore.streams WHERE stream_id = %s", (stream_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        """The stream head's (version, last event hash), None for an unknown stream."""
        checked_stream_id(stream_id)
        with self.connection() as conn:
            row = conn.execute(
                "SELECT version, last_hash FROM eventstore.streams WHERE stream_id = %s",
                (stream_id,),
            ).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def due_streams(self, prefix: str, now: datetime, limit: int, *,
                    since: datetime | None = None) -> list[DueStream]:
        """The streams whose id starts with ``prefix`` due by ``now`` (and, with ``since``,
        after it), the longest due first (at most ``limit``): a range scan of the due-time
        index, whatever the number of streams not due. A due time of ``-infinity`` reads
        back as ``EARLIEST``."""
        with self.connection() as conn, conn.cursor() as cursor:
            cursor.adapters.register_loader("timestamptz", _DueTimeLoader)
            query, params = ((_DUE_STREAMS, (now, prefix, limit)) if since is None
                             else (_DUE_STREAMS_SINCE, (since, now, prefix, limit)))
            rows = cursor.execute(query, params).fetchall()
        return [DueStream(stream_id, int(version), due_at) for stream_id, version, due_at in rows]

    def defer_due(self, items: Sequence[DueStream]) -> int:
        """Set each stream's due time to ``item.due_at`` (None clears it) only while its head
        is still at ``item.version``, all in one statement: an append in between wins, its
        own due time stands. Returns how many heads were set."""
        if not items:
            return 0
        with self.connection() as conn:
            cursor = conn.execute(
                _DEFER_DUE,
                (json.dumps([[i.stream_id, i.version,
                              None if i.due_at is None else i.due_at.isoformat()]
                             for i in items]),),
            )
            return cursor.rowcount

    def head_position(self) -> Position | None:
        """The highest position in the log (committed, maybe not yet readable), for lag."""
        with self.connection() as conn:
            row = conn.execute(
                # Aliased: an output column named transaction_id (the text cast) would be
                # what ORDER BY sorts on: text order ("99" after "100"), and no index.
                "SELECT transaction_id::text AS xid, global_position FROM eventstore.events"
                " ORDER BY transaction_id DESC, global_position DESC LIMIT 1"
            ).fetchone()
        return Position(int(row[0]), int(row[1])) if row else None

    def horizon(self) -> Position | None:
        """The last event every later gap-safe read agrees on: nothing can ever be
        committed before it (None: nothing is final yet). See :meth:`scan_streams`."""
        with self.connection() as conn:
            return horizon_on(conn)

    def scan_streams(
        self, prefix: str, *, part: int = 0, parts: int = 1
    ) -> Iterator[ScannedEvent]:
        """Every event of the streams whose id starts with ``prefix``, stream by stream in
        version order, from one snapshot (REPEATABLE READ) on a connection of its own; each
        as a :class:`ScannedEvent` (what a fold needs, data as the stored JSON text).

        ``part``/``parts`` split the streams by a hash of their id, so ``parts`` processes
        can each read a disjoint share. A snapshot taken after :meth:`horizon` holds every
        event up to the horizon. For bulk folds (a rebuild); the generator holds its
        connection and snapshot until it is exhausted or closed.
        """
        if not 0 <= part < parts:
            raise ValueError(f"part must be in [0, {parts}), got {part}")
        with translated_errors(), psycopg.connect(self._conninfo) as conn:
            configure_connection(conn)
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with conn.transaction():
                yield from scan_streams_on(conn, prefix, part, parts)

    def checkpoint(self, subscription: str) -> Position | None:
        """A subscription's stored checkpoint, read without joining it (for lag reports:
        works on a read-only store, where :meth:`subscription` is refused)."""
        with self.connection() as conn:
            return checkpoint_on(conn, subscription)

    def subscription(self, name: str, *, log_from: EventStore | None = None) -> Subscription:
        """A checkpointed follower of the global log; one active consumer per name.

        ``log_from`` reads the log's pages from another store (a hot standby's read-only
        store) while the checkpoint and the batch's transaction stay on this one.
        """
        return Subscription(self, name, log_from=log_from)


def _recorded(stream_id: str, event: PreparedEvent, row: tuple[Any, ...]) -> RecordedEvent:
    """An appended event as recorded: what was prepared, and its row of the append
    (events.eventstore.appending.Row)."""
    version, position, xid, recorded_at, prev_hash, event_hash = row
    return recorded_event_row(
        stream_id, version, event.event_id, event.type, event.schema_version, event.data,
        event.metadata, recorded_at, xid, position, event_hash, prev_hash, event.tenant_id,
        HASH_VERSION,
    )


def _original_append_on(
    conn: psycopg.Connection[Any], stream_id: str, prepared: list[PreparedEvent]
) -> AppendResult | None:
    """The earlier append these events repeat (see store_rules.original_append), read from
    the events stored under their ids; only looked up when the caller gave ids."""
    if not any(event.id_was_given for event in prepared):
        return None
    stored = {e.event_id: e for e in events_by_id_on(conn, [e.event_id for e in prepared])}
    return original_append(stream_id, prepared, stored)
