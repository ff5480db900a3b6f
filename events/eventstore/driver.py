"""The one boundary where psycopg errors become the store's typed errors, and row mapping."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Final
from uuid import UUID

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg.types.json import set_json_loads

from events.errors import (
    ConcurrencyError,
    EventIdConflict,
    EventStoreError,
    InvalidEvent,
    ReadOnlyStore,
    StoreUnavailable,
)
from events.eventstore.model import Position, RecordedEvent

WRONG_VERSION_SQLSTATE: Final = "SF409"
"""Raised by eventstore.append_events when the stream is not at the expected version."""

# data and metadata as their JSON text: the client's text loader reads those in C, and
# stored_event_row parses them with the json module's scanner, no loader wrapper per value.
# Measured on a 1000-event read_all page (same run, interleaved): ~49 ms through psycopg's
# jsonb loader, ~35 ms so, ~17 ms for the same rows as plain tuples with the JSON left as
# text: decoding is most of a page, and the horizon filter costs the server < 1 ms.
EVENT_COLUMNS: Final = (
    "stream_id, stream_version, event_id, event_type, schema_version,"
    " data::text AS data, metadata::text AS metadata, "
    # Aliased: an output column named transaction_id would capture ORDER BY transaction_id
    # and sort by the cast expression, losing the (transaction_id, global_position) index.
    "recorded_at, transaction_id::text::bigint AS xid, global_position, event_hash, "
    "prev_hash, tenant_id, hash_version"
)
"""The select list that :func:`stored_event_row` maps, in this order."""


_decode_json = json.JSONDecoder().decode


def _load_json(data: str | bytes) -> Any:
    # psycopg hands jsonb over as UTF-8 bytes; decoding them directly skips json.loads'
    # encoding detection, which is a measurable share of reading a page of events.
    return _decode_json(data if isinstance(data, str) else data.decode("utf-8"))


# The scanner json.loads runs after its checks for bytes, encodings and surrounding
# whitespace, none of which jsonb's text output has: the same values, ~2x faster per
# document, and an empty metadata object ~5x faster.
_scan_json: Callable[[str, int], tuple[Any, int]] = (
    json.JSONDecoder().scan_once  # type: ignore[attr-defined] # set in JSONDecoder.__init__
)


def stored_event_row(values: Sequence[Any]) -> RecordedEvent:
    """Row maker (for ``row_factory=stored_event_rows``) over :data:`EVENT_COLUMNS`: the
    stored row as a RecordedEvent, its data and metadata parsed from their JSON text."""
    (stream_id, stream_version, event_id, event_type, schema_version, data, metadata,
     recorded_at, transaction_id, global_position, event_hash, prev_hash, tenant_id,
     hash_version) = values
    return recorded_event_row(
        stream_id, stream_version, event_id, event_type, schema_version,
        _scan_json(data, 0)[0], _scan_json(metadata, 0)[0], recorded_at,
        transaction_id, global_position, event_hash, prev_hash, tenant_id, hash_version,
    )


def stored_event_rows(cursor: object) -> Callable[[Sequence[Any]], RecordedEvent]:
    """Row factory for a cursor selecting :data:`EVENT_COLUMNS` (psycopg's RowFactory)."""
    return stored_event_row


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    """Per-connection setup for every connection the store opens (faster jsonb loading)."""
    set_json_loads(_load_json, conn)


def recorded_event_row(  # noqa: PLR0917 - an event's columns, positionally
    stream_id: str,
    stream_version: int,
    event_id: UUID,
    event_type: str,
    schema_version: int,
    data: dict[str, Any],
    metadata: dict[str, Any],
    recorded_at: datetime,
    transaction_id: int,
    global_position: int,
    event_hash: str,
    prev_hash: str,
    tenant_id: str | None,
    hash_version: int,
) -> RecordedEvent:
    """A RecordedEvent from its columns, data and metadata already decoded (an append's
    result, or a stored row via :func:`stored_event_row`)."""
    # Built without the frozen dataclasses' __init__ (one object.__setattr__ per field):
    # this runs for every event read, and rebuilds read millions. Same attributes, same
    # equality and hashing; the values come straight from typed columns.
    position = _new(Position)
    position.__dict__.update(transaction_id=transaction_id, global_position=global_position)
    event = _new(RecordedEvent)
    event.__dict__.update(
        stream_id=stream_id,
        stream_version=stream_version,
        event_id=event_id,
        type=event_type,
        schema_version=schema_version,
        data=data,
        metadata=metadata,
        recorded_at=recorded_at,
        position=position,
        event_hash=event_hash,
        prev_hash=prev_hash,
        tenant_id=tenant_id,
        hash_version=hash_version,
    )
    return event


_new = object.__new__


class translated_errors:  # noqa: N801 - used like a function: ``with translated_errors():``
    """Run database work, turning driver errors into the store's errors (the only place).

    ``stream_id``/``expected`` name an append's stream for ConcurrencyError; other
    driver errors become ``otherwise`` prefixed with ``context``.

    A class rather than a generator context manager: every append and read enters one or
    two, and a generator's setup and teardown cost several times a method call's.
    """

    __slots__ = ("context", "expected", "otherwise", "stream_id")

    def __init__(
        self,
        stream_id: str | None = None,
        expected: object = None,
        *,
        otherwise: type[EventStoreError] = EventStoreError,
        context: str = "database error",
    ) -> None:
        self.stream_id, self.expected = stream_id, expected
        self.otherwise, self.context = otherwise, context

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or isinstance(exc, EventStoreError):
            return
        if isinstance(exc, psycopg_pool.PoolTimeout):
            raise StoreUnavailable(f"no database connection available: {exc}") from exc
        if isinstance(exc, psycopg.Error):
            raise self._translated(exc) from exc

    def _translated(self, exc: psycopg.Error) -> EventStoreError:
        stream_id, otherwise, context = self.stream_id, self.otherwise, self.context
        if isinstance(exc, psycopg.OperationalError):
            return StoreUnavailable(f"database unavailable: {exc}")
        if isinstance(exc, pg_errors.UniqueViolation):
            if stream_id is not None and exc.diag.constraint_name == "events_event_id_key":
                return EventIdConflict(_detail_key(exc), "in another append")
            return otherwise(f"{context}: {exc}")
        if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
            # A hot standby, or a session a read-only store opened: the write went to the
            # wrong server (events.eventstore.read_only), which no retry there can fix.
            return ReadOnlyStore(f"{context}: {exc}; writes go to the primary")
        if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedFunction):
            if otherwise is not EventStoreError:
                return otherwise(f"{context}: {exc}")
            return EventStoreError(f"{exc}; has `sagafleet db migrate` run?")
        if isinstance(exc, pg_errors.DataError):
            if stream_id is None:
                return otherwise(f"{context}: {exc}")
            return InvalidEvent(f"stream {stream_id!r}: rejected by the database: {exc}")
        if exc.sqlstate == WRONG_VERSION_SQLSTATE and stream_id is not None:
            return ConcurrencyError(stream_id, self.expected, int(exc.diag.message_detail or 0))
        return otherwise(f"{context}: {exc}")


def _detail_key(exc: psycopg.Error) -> str:
    # DETAIL: Key (event_id)=(…) already exists.
    detail = exc.diag.message_detail or ""
    start, end = detail.find("=("), detail.find(")", detail.find("=(") + 2)
    return detail[start + 2 : end] if start >= 0 and end > start else "?"
