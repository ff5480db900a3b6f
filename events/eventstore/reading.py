"""Read queries shared by the store and subscriptions: one stream, and the gap-safe log."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final, cast

import psycopg
from psycopg.rows import args_row

from events.errors import InvalidArgument
from events.eventstore.driver import EVENT_COLUMNS, stored_event_rows
from events.eventstore.model import Position, RecordedEvent, ScannedEvent
from events.eventstore.prepare import MAX_STREAM_ID_LENGTH
from events.eventstore.rules import checked_stream_list
from saga_core.keys import text_argument_problem

START: Final = Position(0, 0)
"""A position before every event."""

# Only rows whose writer's xid is below the oldest still-running xid are read: those can
# no longer be joined by a late commit with a lower position, so the cursor never skips.
_READ_ALL = f"""
SELECT {EVENT_COLUMNS} FROM eventstore.events
 WHERE (transaction_id, global_position) > (%s::text::xid8, %s)
   AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY transaction_id, global_position
 LIMIT %s
"""  # noqa: S608 - EVENT_COLUMNS is a constant

_READ_STREAM = f"""
SELECT {EVENT_COLUMNS} FROM eventstore.events
 WHERE stream_id = %s AND stream_version > %s AND stream_version <= %s
 ORDER BY stream_version
"""  # noqa: S608 - EVENT_COLUMNS is a constant

_READ_STREAMS = f"""
SELECT {EVENT_COLUMNS} FROM eventstore.events
 WHERE stream_id = ANY(%s)
 ORDER BY stream_id, stream_version
"""  # noqa: S608 - EVENT_COLUMNS is a constant


# The last event below the snapshot horizon: everything up to it is final (no late commit
# can sort before it), the same rule that keeps read_all gap-safe. Aliased (see
# EVENT_COLUMNS): unnamed, the cast would be the column ORDER BY sorts on, and a backward
# index walk of one row would become a sort of every event below the horizon.
_HORIZON = """
SELECT transaction_id::text::bigint AS xid, global_position FROM eventstore.events
 WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY transaction_id DESC, global_position DESC
 LIMIT 1
"""

# One hash part of the streams with a prefix, each stream in version order: only what a
# fold reads (no metadata, hashes, positions or times to send and parse).
_SCAN = """
SELECT stream_id, stream_version, event_type, schema_version, data::text
  FROM eventstore.events
 WHERE starts_with(stream_id, %(prefix)s)
   AND (hashtext(stream_id) & 2147483647) %% %(parts)s = %(part)s
 ORDER BY stream_id, stream_version
"""

_BY_IDS = f"SELECT {EVENT_COLUMNS} FROM eventstore.events WHERE event_id = ANY(%s)"  # noqa: S608


MAX_VERSION: Final = 2**63 - 1
"""The highest stream version (and global position) PostgreSQL's bigint holds."""


def checked_stream_id(stream_id: object) -> str:
    """A stream id a read can look up, or InvalidArgument naming what is wrong with it."""
    problem = text_argument_problem("stream id", stream_id, MAX_STREAM_ID_LENGTH)
    if problem is not None:
        raise InvalidArgument(problem)
    return cast(str, stream_id)  # a str: text_argument_problem checked


def checked_version(what: str, value: object) -> int:
    """A stream version argument: an int in 0..2**63-1, or InvalidArgument naming it."""
    if type(value) is int and 0 <= value <= MAX_VERSION:
        return value
    raise InvalidArgument(f"{what} must be an int in 0..{MAX_VERSION}, got {value!r}")


def read_all_start(after: object, limit: object) -> Position:
    """Where a ``read_all`` page starts (the log's start for None), or InvalidArgument for
    a cursor that is not a Position or a limit that is not a count (an int >= 0)."""
    if after is not None and not isinstance(after, Position):
        raise InvalidArgument(
            f"after must be a Position or None, got {type(after).__name__}"
            " (Position.parse reads the text form back)"
        )
    checked_version("limit", limit)
    return after or START


def read_all_on(
    conn: psycopg.Connection[Any], after: Position | None, limit: int
) -> list[RecordedEvent]:
    """A gap-safe page of the global log strictly after ``after``, in cursor order."""
    cursor = read_all_start(after, limit)
    # Binary results parse faster; prepare=False keeps a custom plan per call, so the
    # planner always sees the real cursor and picks the index walk (a generic plan could
    # choose bitmap-scan-and-sort over the whole tail of the log).
    with conn.cursor(row_factory=stored_event_rows, binary=True) as cur:
        cur.execute(
            _READ_ALL,
            (str(cursor.transaction_id), cursor.global_position, limit),
            prepare=False,
        )
        return cur.fetchall()


def read_stream_on(
    conn: psycopg.Connection[Any],
    stream_id: str,
    after_version: int = 0,
    to_version: int | None = None,
) -> list[RecordedEvent]:
    """A stream's events with ``after_version < version <= to_version``, in version order."""
    checked_stream_id(stream_id)
    checked_version("after_version", after_version)
    upper = MAX_VERSION if to_version is None else checked_version("to_version", to_version)
    with conn.cursor(row_factory=stored_event_rows, binary=True) as cur:
        cur.execute(_READ_STREAM, (stream_id, after_version, upper))
        return cur.fetchall()


def read_streams_on(
    conn: psycopg.Connection[Any], stream_ids: Sequence[str]
) -> dict[str, list[RecordedEvent]]:
    """Several streams in one query: each id (duplicates once) to its events in version
    order, an empty list for a stream that has none."""
    found: dict[str, list[RecordedEvent]] = {
        checked_stream_id(stream_id): [] for stream_id in checked_stream_list(stream_ids)
    }
    if found:
        with conn.cursor(row_factory=stored_event_rows, binary=True) as cur:
            for event in cur.execute(_READ_STREAMS, (list(found),)):
                found[event.stream_id].append(event)
    return found


def events_by_id_on(conn: psycopg.Connection[Any], event_ids: list[object]) -> list[RecordedEvent]:
    """The stored events among ``event_ids`` (any stream), in no particular order."""
    with conn.cursor(row_factory=stored_event_rows) as cur:
        cur.execute(_BY_IDS, (event_ids,))
        return cur.fetchall()


def horizon_on(conn: psycopg.Connection[Any]) -> Position | None:
    """The last event every later gap-safe read agrees on (None: nothing is final yet)."""
    row = conn.execute(_HORIZON).fetchone()
    return None if row is None else Position(int(row[0]), int(row[1]))


def scan_streams_on(
    conn: psycopg.Connection[Any], prefix: str, part: int, parts: int, *, itersize: int = 2000
) -> Iterator[ScannedEvent]:
    """Every event of the streams starting with ``prefix`` in hash part ``part`` of
    ``parts``, stream by stream in version order, streamed through a server-side cursor.

    Runs in ``conn``'s open transaction, whose snapshot it reads (the caller picks the
    isolation level; REPEATABLE READ gives one consistent view of every stream).
    """
    with conn.cursor(
        name=f"scan_streams_{part}_of_{parts}", row_factory=args_row(ScannedEvent),
        binary=True,
    ) as cur:
        cur.itersize = itersize
        cur.execute(_SCAN, {"prefix": prefix, "parts": parts, "part": part})
        yield from cur
