"""The append: one of two statements, by whether the client knows where the chain starts.

::

    chain start known? (a new stream: the genesis hash; else the hash of the expected
                        version, remembered from this store's own appends and reads)
      yes -> the chained insert: hashes computed here; the head is created, or moved
             only from that version and hash, and the events stored  -- one statement
             wrote nothing (the stream exists, or moved on) -> the append function
      no  -> the append function, eventstore.append_events (append.sql, beside this
             module): lock or create the head, check the version (SF409 otherwise),
             chain on the server, store
                                                                     -- one statement

Both hash the same body (events.eventstore.hashing.body_around_version): the chained insert here,
the function by splicing each version into the text the client sends. The body holds the
append's recording time, which the client read once (events.eventstore.prepare) and both statements
store as it is, with the hash version, once per append (events migration 0011). Either path moves
the stream-head row in its first write, which assigns the transaction id, and sets the
head's due time there when the caller gives one (events migration 0009). The chained
insert reads a single event's row from scalars, a small batch's from one JSON document and a
large batch's from one array per column (:func:`rows_for`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from enum import Enum
from itertools import product
from typing import Any, Final, NamedTuple
from weakref import WeakKeyDictionary

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus

from events.eventstore.hashing import HASH_VERSION, chain_hash, json_string
from events.eventstore.model import GENESIS_HASH, KEEP_DUE, DueTime, DueTimeChange
from events.eventstore.prepare import PreparedEvent
from events.eventstore.waking import NOTIFY_CALL

# The recording time and hash version once per append, for every event of it (events
# migration 0011); the hash version as a constant of the text.
_FUNCTION: Final = f"""
SELECT stream_version, global_position, transaction_id::bigint, recorded_at, prev_hash,
       event_hash
  FROM eventstore.append_events(%(stream)s, %(expected)s, %(events)s::text::jsonb,
                                %(notify)s, %(due_set)s, %(due_at)s::timestamptz,
                                %(at)s::text::timestamptz, {HASH_VERSION}::smallint)
""".encode()  # noqa: S608 - HASH_VERSION is a constant int

# The caller computed every event's version and hash, so the server only checks where the
# chain starts and stores it, behind one of two heads (the statement's first write): a
# stream that must not exist is created; a stream at the version whose hash this store
# remembers is moved. One statement holding both heads as CTEs cost ~6% more per append
# (same-run, measured), and leaving creation to the function ~14% more per creation. A
# data-modifying CTE always runs to completion and returns the head row or none, so the
# wake-up is sent at most once.
_CHAINED_INSERT: Final = """
WITH head AS ({head}
    RETURNING s.version, {wake}
)
INSERT INTO eventstore.events AS e (stream_id, stream_version, event_id, event_type,
    schema_version, data, metadata, tenant_id, recorded_at, hash_version, prev_hash, event_hash)
SELECT %(stream)s, {rows}
RETURNING e.stream_version, e.global_position, e.transaction_id::text::bigint,
          e.recorded_at
"""

_CREATED_HEAD: Final = """
    -- A new stream, chained from the genesis hash. Concurrent creators meet on the
    -- primary key: the loser waits, gets no row and writes nothing.
    INSERT INTO eventstore.streams AS s (stream_id, version, last_hash, due_at)
    VALUES (%(stream)s, %(version)s, %(last_hash)s, {due})
    ON CONFLICT (stream_id) DO NOTHING"""

_MOVED_HEAD: Final = """
    -- The head moves on only from the version and hash the chain starts at.
    UPDATE eventstore.streams s
       SET version = %(version)s, last_hash = %(last_hash)s, updated_at = now(){due}
     WHERE s.stream_id = %(stream)s AND s.version = %(expected)s AND s.last_hash = %(tip)s"""

# Where the rows come from, by the append's size (:class:`Rows`). The recording time is one
# parameter per append, the hash version a constant of the text: the same for every event.
#
# One event (an append per saga step, the common case): its one row as scalars selected from
# the head, its version and hashes the head's, so the server neither parses nor unpacks a
# document: ~15 us (~3%) less per single-event append than the document, and ~1% less than a
# one-row VALUES list joined to the head (same-run interleaved, 4 x 2000 appends).
_ONE_ROW: Final = f"""%(version)s::bigint, %(id)s::uuid, %(type)s::text, %(sv)s::integer,
       %(data)s::text::jsonb, %(meta)s::text::jsonb, %(tenant)s::text,
       %(at)s::text::timestamptz, {HASH_VERSION}::smallint, %(tip)s::text,
       %(last_hash)s::text
  FROM head"""

# A small batch (a saga's start, a step's record and the next claim): one JSON document,
# written by joining texts prepared per event. Arrays cost the client more here: psycopg
# dumps each list in Python, ~10 us an array whatever its length, and there are eight.
_DOCUMENT_ROWS: Final = f"""x.v, x.id, x.type, x.sv, x.data, x.meta, x.tenant,
       %(at)s::text::timestamptz, {HASH_VERSION}::smallint, x.prev, x.hash
  FROM head, jsonb_to_recordset(%(events)s::text::jsonb)
             AS x(v bigint, id uuid, type text, sv integer, data jsonb, meta jsonb,
                  tenant text, prev text, hash text)"""

# A large batch: one array per column, sent binary (%b: a list of 100 texts is dumped in
# ~20 us; as a text array literal, ~1.3 ms) and unnested together. The server casts each
# event's data text to jsonb, as a hand-written INSERT's parameters are, instead of parsing a
# whole document and extracting every field of it. The prev hashes are the chain but its
# last, the hashes the chain but its first.
_ARRAY_ROWS: Final = f"""%(expected)s::bigint + x.ord, x.id::uuid, x.type, x.sv,
       x.data::jsonb, x.meta::jsonb, x.tenant,
       %(at)s::text::timestamptz, {HASH_VERSION}::smallint, x.prev, x.hash
  FROM head, unnest(%(ids)b::text[], %(types)b::text[], %(svs)b::integer[],
                    %(data)b::text[], %(meta)b::text[], %(tenants)b::text[],
                    %(prevs)b::text[], %(hashes)b::text[])
             WITH ORDINALITY AS x(id, type, sv, data, meta, tenant, prev, hash, ord)"""

ARRAYS_FROM: Final = 32
"""The fewest events an append sends as arrays rather than as one document. Same-run
interleaved appends (3 x 1000, 2 x 300 of 100 events): the arrays took ~15% longer for 2-3
events, as long at ~25, 5% less at 50 and 8-10% less at 100 (the server's parse saved
outgrows the client's dumps); the client's CPU is ~40 us more at 3 events and ~160 us more
at 100, the server's ~0.4 ms less at 100."""


class Rows(Enum):
    """Where a chained insert's rows come from."""

    ONE = "one"
    """One event's row, as scalars."""
    DOCUMENT = "document"
    """Fewer than :data:`ARRAYS_FROM` events, from one JSON document."""
    ARRAYS = "arrays"
    """At least :data:`ARRAYS_FROM` events, from one binary array per column."""


_ROWS: Final = {Rows.ONE: _ONE_ROW, Rows.DOCUMENT: _DOCUMENT_ROWS, Rows.ARRAYS: _ARRAY_ROWS}


def rows_for(count: int) -> Rows:
    """How an append of ``count`` events (at least one) sends its rows."""
    if count == 1:
        return Rows.ONE
    return Rows.DOCUMENT if count < ARRAYS_FROM else Rows.ARRAYS


class ChainedInsert(NamedTuple):
    """Which chained insert an append runs: the key of one of the 24 prebuilt statements.

    Whether to wake subscribers and whether to set the due time are written into the text,
    not sent as parameters (each parameter costs the client a dump per append), so each
    case is a statement of its own.
    """

    new_stream: bool
    """The head: created (a new stream, chained from the genesis hash), else moved on."""
    rows: Rows
    """Where the rows come from (:func:`rows_for`)."""
    wake: bool
    """Whether the statement wakes subscribers (``pg_notify``)."""
    due: bool
    """Whether the statement sets the head's due time (``%(due_at)s``)."""


def _chained_statement(key: ChainedInsert) -> bytes:
    """The text of the chained insert ``key`` names."""
    if key.new_stream:
        head = _CREATED_HEAD.format(due="%(due_at)s::timestamptz" if key.due else "NULL")
    else:
        head = _MOVED_HEAD.format(due=", due_at = %(due_at)s::timestamptz" if key.due else "")
    # As bytes: psycopg would encode a text statement on every execution, and hash the new
    # bytes to find its parsed form in its cache (a constant's hash is computed once).
    return _CHAINED_INSERT.format(
        head=head, rows=_ROWS[key.rows], wake=NOTIFY_CALL if key.wake else "NULL"
    ).encode()


_BOTH: Final = (False, True)

CHAINED_INSERTS: Final[Mapping[ChainedInsert, bytes]] = {
    key: _chained_statement(key)
    for key in (ChainedInsert(*case) for case in product(_BOTH, Rows, _BOTH, _BOTH))
}
"""Every chained insert, built once, by its :class:`ChainedInsert`."""

# One cursor per connection, kept: a cursor per statement (conn.execute) cost ~30-40 us
# more per single-event append (~5%; same-run interleaved measurement, 1500 appends). A
# pooled connection serves one thread at a time, and so does its cursor, which keeps only
# the last append's result until the next. Binary results: timestamps and integers cost
# the server less to send and the client less to read.
_CURSORS: WeakKeyDictionary[psycopg.Connection[Any], psycopg.Cursor[Any]] = WeakKeyDictionary()


def _cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
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
    due: DueTime = KEEP_DUE,
) -> list[Row]:
    """Execute the append on ``conn``; the rows it inserted, in stream-version order.

    ``expected``: -1 any, 0 no stream, n exactly n. With ``savepoint`` the append runs in a
    savepoint of the caller's open transaction, so a failure rolls back only the append
    (the store decides when: :meth:`events.eventstore.postgres.EventStore.append`,
    :meth:`~events.eventstore.postgres.EventStore.transaction`). ``tip`` is the hash of
    version ``expected`` when the caller knows it: the chain is then computed here and the
    server only checks it continues from there (a wrong tip costs a fallback, no more).
    ``due``: the head's new due time, written by the same statement that moves the head.
    """
    if savepoint:
        rows = _in_savepoint(conn, stream_id, expected, prepared, notify, tip=tip, due=due)
    else:
        rows = _append(conn, stream_id, expected, prepared, notify, tip=tip, due=due)
    if len(rows) > 1:
        rows.sort(key=lambda row: row[0])
    return rows


def _put_due(params: dict[str, Any], due: DueTime) -> bool:
    """Put the due time to write into ``params`` (None clears it); whether there is one
    (``KEEP_DUE``: none, and nothing is put)."""
    if isinstance(due, DueTimeChange):
        return False
    params["due_at"] = due
    return True


def _append(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str | None,
    due: DueTime,
) -> list[Row]:
    # Where the chain starts, when it is known here: a new stream's at the genesis hash.
    chain_from = GENESIS_HASH if expected == 0 else tip
    if chain_from is not None:
        rows = _chained_insert(conn, stream_id, expected, prepared, notify, tip=chain_from, due=due)
        if rows:  # none: the stream exists, or moved on; the function decides
            return rows
    return _append_function(conn, stream_id, expected, prepared, notify, due=due)


def _append_function(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    due: DueTime,
) -> list[Row]:
    """The general append: the server locks the head, checks the version, chains."""
    # One JSON document instead of per-field arrays: psycopg's per-element array dumping
    # costs more client CPU than the whole server-side append.
    elements = ",".join(
        f'{{{event.columns_json},"before":{json_string(event.body.before)},'
        f'"after":{json_string(event.body.after)}}}'
        for event in prepared
    )
    params = {
        "stream": stream_id,
        "expected": expected,
        "events": f"[{elements}]",
        "notify": notify,
        "due_at": None,  # a new stream kept at no due time gets NULL
        "at": prepared[0].recorded_at_text,
    }
    params["due_set"] = _put_due(params, due)
    return _cursor(conn).execute(_FUNCTION, params).fetchall()


def _chained_insert(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str,
    due: DueTime,
) -> list[Row]:
    """The append with its chain computed here from ``tip``, the hash of version
    ``expected`` (the genesis hash for a new stream); no rows when the head is not at that
    version with that hash, or when a stream expected not to exist does."""
    rows = rows_for(len(prepared))
    if rows is Rows.ONE:
        return _chained_one(conn, stream_id, expected, prepared[0], notify, tip=tip, due=due)
    chain = [tip]  # chain[i]: the hash of version expected + i
    for version, event in enumerate(prepared, expected + 1):
        before, after = event.body  # body.at(version), without a method call per event
        chain.append(chain_hash(chain[-1], f"{before}{version}{after}"))
    params: dict[str, Any] = {
        "stream": stream_id,
        "expected": expected,
        "tip": tip,
        "version": expected + len(prepared),
        "last_hash": chain[-1],
        "at": prepared[0].recorded_at_text,
    }
    if rows is Rows.DOCUMENT:
        params["events"] = "[{}]".format(",".join([
            f'{{{event.columns_json},"v":{version},"prev":"{prev}","hash":"{digest}"}}'
            for version, event, prev, digest in zip(
                range(expected + 1, expected + len(prepared) + 1), prepared, chain[:-1],
                chain[1:], strict=True)
        ]))
    else:
        params.update(
            ids=[event.id_text for event in prepared],
            types=[event.type for event in prepared],
            svs=[event.schema_version for event in prepared],
            data=[event.data_json for event in prepared],
            meta=[event.metadata_json for event in prepared],
            tenants=[event.tenant_id for event in prepared],
            prevs=chain[:-1],
            hashes=chain[1:],
        )
    due_set = _put_due(params, due)
    statement = CHAINED_INSERTS[
        ChainedInsert(new_stream=expected == 0, rows=rows, wake=notify, due=due_set)
    ]
    stored = _cursor(conn).execute(statement, params).fetchall()
    # The server returns only what it assigned; the chain is what was computed here (the
    # two hashes per row cost ~1-2% of an append to send back and decode).
    return [(*row, chain[row[0] - expected - 1], chain[row[0] - expected]) for row in stored]


def _chained_one(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    event: PreparedEvent,
    notify: bool,
    *,
    tip: str,
    due: DueTime,
) -> list[Row]:
    """:func:`_chained_insert` of one event (an append per saga step, the common case):
    its one row as scalars, version, tip and last hash the head's."""
    before, after = event.body
    digest = chain_hash(tip, f"{before}{expected + 1}{after}")
    params: dict[str, Any] = {
        "stream": stream_id,
        "expected": expected,
        "tip": tip,
        "version": expected + 1,
        # The id as its text (the statement casts it): it is at hand, and a UUID would be
        # converted again to be sent.
        "last_hash": digest,
        "id": event.id_text,
        "type": event.type,
        "sv": event.schema_version,
        "tenant": event.tenant_id,
        "data": event.data_json,
        "meta": event.metadata_json,
        "at": event.recorded_at_text,
    }
    due_set = _put_due(params, due)
    statement = CHAINED_INSERTS[
        ChainedInsert(new_stream=expected == 0, rows=Rows.ONE, wake=notify, due=due_set)
    ]
    stored = _cursor(conn).execute(statement, params).fetchone()
    return [] if stored is None else [(*stored, tip, digest)]


def _in_savepoint(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str | None,
    due: DueTime,
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
            rows = _append(conn, stream_id, expected, prepared, notify, tip=tip, due=due)
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
