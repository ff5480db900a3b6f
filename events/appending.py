"""The append statements: one-statement fast paths and the eventstore.append_events function.

Each chains ``sha256(prev_hash || canonical body)`` from the stream's tip, and moves the
stream-head row in its first statement (which assigns the transaction id):

* a new stream (expected "no stream") and a batch at a version whose hash this store knows
  send their chain computed client-side; the server creates the head, or moves it only if
  it is at that version with that hash, and stores the events (the chained insert);
* one event on an existing stream is hashed by the server in one prepared statement whose
  UPDATE both locks and moves the head (one heap write, not a lock and then an update);
* when a fast path matches nothing (the stream exists, or is at another version or hash)
  it writes nothing, and the function decides: create the stream, append with a
  server-side chain, or raise SF409 with the actual version.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final
from weakref import WeakKeyDictionary

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus

from events.hashing import chain_hash, hash_body_text, json_string
from events.model import GENESIS_HASH
from events.prepare import PreparedEvent

_FUNCTION: Final = """
SELECT stream_version, global_position, transaction_id::bigint, recorded_at, prev_hash,
       event_hash
  FROM eventstore.append_events(%(stream)s, %(stream_json)s, %(expected)s,
                                %(events)s::text::json, %(notify)s)
"""

_ONE_EVENT: Final = """
WITH head AS (
    -- Locking the head and moving it is one write: SET reads the old row, RETURNING
    -- yields the new one, whose prev_hash is the tip this event chains from. Under
    -- concurrent appends the re-checked WHERE fails on a moved version: no row.
    UPDATE eventstore.streams s
       SET version = s.version + 1,
           prev_hash = s.last_hash,
           -- The same hash body as eventstore.append_events and events.hashing.hash_body.
           last_hash = encode(sha256(convert_to(s.last_hash
               || '{{"data":' || %(data)s::text
               || ',"event_id":"' || %(id)s::text
               || '","metadata":' || %(meta)s::text
               || ',"schema_version":' || %(sv)s::text
               || ',"stream_id":' || %(stream_json)s::text
               || ',"stream_version":' || (s.version + 1)::text
               || ',"type":' || %(type_json)s::text || '}}',
               'UTF8')), 'hex'),
           updated_at = now()
     WHERE s.stream_id = %(stream)s AND (%(expected)s < 0 OR s.version = %(expected)s)
    RETURNING s.version, s.prev_hash, s.last_hash{notify}
)
INSERT INTO eventstore.events AS e (stream_id, stream_version, event_id, event_type,
    schema_version, data, metadata, tenant_id, prev_hash, event_hash)
SELECT %(stream)s, h.version, %(id)s, %(type)s, %(sv)s, %(data)s::text::jsonb,
       %(meta)s::text::jsonb, %(tenant)s, h.prev_hash, h.last_hash
  FROM head h
RETURNING e.stream_version, e.global_position, e.transaction_id::text::bigint,
          e.recorded_at, e.prev_hash, e.event_hash
"""

# A data-modifying CTE always runs to completion, so its RETURNING clause sends the wake-up
# (once: it returns the single head row, or none when nothing is appended).
_WAKE_UP: Final = ", pg_notify('eventstore_events', '')"
_ONE_EVENT_NOTIFY: Final = _ONE_EVENT.format(notify=_WAKE_UP)
_ONE_EVENT_QUIET: Final = _ONE_EVENT.format(notify="")

# The caller computed every event's version and hashes (events.hashing, the same bodies
# as above), so the server only checks where the chain starts and stores it. jsonb, not
# json: nothing here needs the text verbatim, and parsing the document once as jsonb lets
# each event's data be stored without a second parse (half the server time of 100 events).
_CHAINED_INSERT: Final = """
INSERT INTO eventstore.events AS e (stream_id, stream_version, event_id, event_type,
    schema_version, data, metadata, tenant_id, prev_hash, event_hash)
SELECT %(stream)s, x.v, x.id, x.type, x.sv, x.data, x.meta, x.tenant, x.prev, x.hash
  FROM head, jsonb_to_recordset(%(events)s::text::jsonb)
             AS x(v bigint, id uuid, type text, sv integer, data jsonb, meta jsonb,
                  tenant text, prev text, hash text)
RETURNING e.stream_version, e.global_position, e.transaction_id::text::bigint,
          e.recorded_at
"""

_KNOWN_TIP_HEAD: Final = """
WITH head AS (
    -- The caller knows the hash of the version it expects: the head moves only if it is
    -- at that version with that hash. No row: nothing is written, the caller falls back.
    UPDATE eventstore.streams s
       SET version = s.version + %(count)s, prev_hash = s.last_hash,
           last_hash = %(last_hash)s, updated_at = now()
     WHERE s.stream_id = %(stream)s AND s.version = %(expected)s
       AND s.last_hash = %(tip)s
    RETURNING s.version{notify}
)"""

_NEW_STREAM_HEAD: Final = """
WITH head AS (
    -- A stream that must not exist chains from the genesis hash. Concurrent creators meet
    -- on the primary key: the loser waits, gets no row, writes nothing and falls back.
    INSERT INTO eventstore.streams AS s (stream_id, version, last_hash, prev_hash)
    VALUES (%(stream)s, %(count)s, %(last_hash)s, %(tip)s)
    ON CONFLICT (stream_id) DO NOTHING
    RETURNING s.version{notify}
)"""


def _chained_statements(head: str) -> tuple[str, str]:
    """The chained insert behind ``head``: (with the wake-up, without)."""
    return (
        "".join((head.format(notify=_WAKE_UP), _CHAINED_INSERT)),
        "".join((head.format(notify=""), _CHAINED_INSERT)),
    )


_KNOWN_TIP_NOTIFY, _KNOWN_TIP_QUIET = _chained_statements(_KNOWN_TIP_HEAD)
_NEW_STREAM_NOTIFY, _NEW_STREAM_QUIET = _chained_statements(_NEW_STREAM_HEAD)

_CURSORS: WeakKeyDictionary[psycopg.Connection[Any], psycopg.Cursor[Any]] = WeakKeyDictionary()


def _cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """The connection's append cursor, made once: ``conn.execute`` builds a cursor (and its
    adapters) per statement, about 20 us of a single append's client CPU. Binary results:
    timestamps and integers cost the server less to send and the client less to read. A
    pooled connection serves one thread at a time, and so does its cursor, which keeps
    only the last append's result (a row per event) until the next."""
    cursor = _CURSORS.get(conn)
    if cursor is None or cursor.closed:
        cursor = _CURSORS[conn] = conn.cursor(binary=True)
    return cursor


Row = tuple[Any, ...]
"""(stream_version, global_position, transaction_id, recorded_at, prev_hash, event_hash)"""


def run_append(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    savepoint: bool,
    tip: str | None = None,
) -> list[Row]:
    """Execute the append on ``conn``; the rows it inserted, in stream-version order.

    ``expected``: -1 any, 0 no stream, n exactly n. With ``savepoint`` the append joins the
    caller's transaction and a failure rolls back only the append. ``tip`` is the hash of
    version ``expected`` when the caller knows it: the chain is then computed here and the
    server only checks it continues from there (a wrong tip costs a fallback, no more).
    """
    if savepoint and not (
        conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    ):
        rows = _in_savepoint(conn, stream_id, expected, prepared, notify, tip=tip)
    else:
        rows = _statements(conn, stream_id, expected, prepared, notify, tip=tip)
    rows.sort(key=lambda row: row[0])
    return rows


def _statements(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str | None = None,
) -> list[Row]:
    # Where the chain starts, when it is known here: a new stream's at the genesis hash; a
    # known tip is used for batches only (for one event the server's hashing in _ONE_EVENT
    # costs less than a JSON document does).
    chain_from = GENESIS_HASH if expected == 0 else None
    if chain_from is None and len(prepared) > 1:
        chain_from = tip
    if chain_from is not None:
        rows = _chained(conn, stream_id, expected, prepared, notify, tip=chain_from)
        if rows:
            return rows
    elif len(prepared) == 1:
        (event,) = prepared
        rows = _cursor(conn).execute(
            _ONE_EVENT_NOTIFY if notify else _ONE_EVENT_QUIET,
            {
                "stream": stream_id,
                "stream_json": json_string(stream_id),
                "expected": expected,
                "id": event.event_id,
                "type": event.type,
                "type_json": event.type_json,
                "sv": event.schema_version,
                "data": event.data_json,
                "meta": event.metadata_json,
                "tenant": event.tenant_id,
            },
        ).fetchall()
        if rows:
            return rows
    # One JSON document instead of per-field arrays: psycopg's per-element array dumping
    # costs more client CPU than the whole server-side append.
    document = "[" + ",".join(event.wire_json for event in prepared) + "]"
    params = {
        "stream": stream_id,
        "stream_json": json_string(stream_id),
        "expected": expected,
        "events": document,
        "notify": notify,
    }
    return _cursor(conn).execute(_FUNCTION, params).fetchall()


def _chained(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str,
) -> list[Row]:
    """The append as one statement, the chain computed here from ``tip`` (the hash of
    version ``expected``, the genesis hash for a new stream); no rows when the head is not
    at that version with that hash, or when a stream expected not to exist does."""
    stream_json = json_string(stream_id)
    prev, elements, chain = tip, [], {}
    for version, event in enumerate(prepared, expected + 1):
        event_id = str(event.event_id)
        digest = chain_hash(
            prev,
            hash_body_text(
                stream_json=stream_json,
                stream_version=version,
                event_id=event_id,
                type_json=event.type_json,
                schema_version=event.schema_version,
                data_json=event.data_json,
                metadata_json=event.metadata_json,
            ),
        )
        # The function's element (id, type, sv, data, meta, tenant) plus where it goes.
        elements.append(
            f'{event.wire_json[:-1]},"v":{version},"prev":"{prev}","hash":"{digest}"}}'
        )
        chain[version] = (prev, digest)
        prev = digest
    params = {
        "count": len(prepared),
        "last_hash": prev,
        "stream": stream_id,
        "expected": expected,
        "tip": tip,
        "events": "[" + ",".join(elements) + "]",
    }
    if expected == 0:
        statement = _NEW_STREAM_NOTIFY if notify else _NEW_STREAM_QUIET
    else:
        statement = _KNOWN_TIP_NOTIFY if notify else _KNOWN_TIP_QUIET
    assigned = _cursor(conn).execute(statement, params).fetchall()
    return [(version, *server, *chain[version]) for version, *server in assigned]


def _in_savepoint(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str | None,
) -> list[Row]:
    """Run inside the caller's transaction without ending it.

    A savepoint (not ``conn.transaction()``, which would commit an idle non-autocommit
    connection's implicit transaction) lets a conflict roll back just the append, so the
    caller's transaction stays usable and the idempotency lookup can run on it.
    """
    # In the caller's own pipeline a nested block would sync on entry and on exit; there,
    # SAVEPOINT rides with the caller's writes and RELEASE with its COMMIT.
    own = conn.pgconn.pipeline_status == PipelineStatus.OFF
    try:
        with conn.pipeline() if own else contextlib.nullcontext():
            conn.execute("SAVEPOINT eventstore_append")
            rows = _statements(conn, stream_id, expected, prepared, notify, tip=tip)
            conn.execute("RELEASE SAVEPOINT eventstore_append")
    except psycopg.Error:
        if own:
            if conn.info.transaction_status == TransactionStatus.INERROR:
                conn.execute("ROLLBACK TO SAVEPOINT eventstore_append")
            raise
        # The failure aborted the caller's pipeline: a Sync resumes it, and only then does
        # the connection report the transaction as failed. A statement the caller queued
        # before ours may be what failed, before the savepoint existed: its transaction is
        # then lost, and the caller gets that statement's error, not the rollback's.
        # (The statements queued behind the failure come back "aborted" at this Sync:
        # consequences of the error being raised, not news.)
        with contextlib.suppress(psycopg.Error), conn.pipeline() as pipeline:
            pipeline.sync()
        if conn.info.transaction_status == TransactionStatus.INERROR:
            with contextlib.suppress(psycopg.Error), conn.pipeline():
                conn.execute("ROLLBACK TO SAVEPOINT eventstore_append")
        raise
    return rows
