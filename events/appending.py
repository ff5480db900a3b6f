"""The append: one of two statements, by whether the client knows where the chain starts.

::

    known tip? (a new stream: the genesis hash; a version this store remembers)
      yes -> the chained insert: hashes computed here; the head is created or moved only
             from that version and hash, and the events stored    -- one statement
             wrote nothing (the stream moved, or exists) -> the append function
      no  -> the append function, eventstore.append_events: lock the head, check the
             version (SF409 otherwise), chain on the server, store -- one statement

Both hash the same body (events.hashing.body_around_version): the chained insert here,
the function by splicing each version into the text the client sends. Either path moves
the stream-head row in its first write, which assigns the transaction id.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus

from events.hashing import chain_hash, json_string
from events.model import GENESIS_HASH
from events.prepare import PreparedEvent

_FUNCTION: Final = """
SELECT stream_version, global_position, transaction_id::bigint, recorded_at, prev_hash,
       event_hash
  FROM eventstore.append_events(%(stream)s, %(expected)s, %(events)s::text::jsonb,
                                %(notify)s)
"""

# The caller computed every event's version and hashes, so the server only checks where
# the chain starts and stores it. A data-modifying CTE always runs to completion, and at
# most one of the two returns the head's row, so the wake-up is sent at most once.
_CHAINED_INSERT: Final = """
WITH moved AS (
    -- An existing stream moves on only from the version and hash the chain starts at.
    UPDATE eventstore.streams s
       SET version = %(version)s, last_hash = %(last_hash)s, updated_at = now()
     WHERE s.stream_id = %(stream)s AND s.version = %(expected)s AND s.last_hash = %(tip)s
    RETURNING s.version, CASE WHEN %(notify)s THEN pg_notify('eventstore_events', '') END
), created AS (
    -- A stream that must not exist is created. Concurrent creators meet on the primary
    -- key: the loser waits, gets no row and writes nothing.
    INSERT INTO eventstore.streams (stream_id, version, last_hash)
    SELECT %(stream)s, %(version)s, %(last_hash)s WHERE %(expected)s = 0
    ON CONFLICT (stream_id) DO NOTHING
    RETURNING version, CASE WHEN %(notify)s THEN pg_notify('eventstore_events', '') END
)
INSERT INTO eventstore.events AS e (stream_id, stream_version, event_id, event_type,
    schema_version, data, metadata, tenant_id, prev_hash, event_hash)
SELECT %(stream)s, x.v, x.id, x.type, x.sv, x.data, x.meta, x.tenant, x.prev, x.hash
  FROM (SELECT version FROM moved UNION ALL SELECT version FROM created) AS head,
       jsonb_to_recordset(%(events)s::text::jsonb)
           AS x(v bigint, id uuid, type text, sv integer, data jsonb, meta jsonb,
                tenant text, prev text, hash text)
RETURNING e.stream_version, e.global_position, e.transaction_id::text::bigint,
          e.recorded_at, e.prev_hash, e.event_hash
"""

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
        rows = _append(conn, stream_id, expected, prepared, notify, tip=tip)
    rows.sort(key=lambda row: row[0])
    return rows


def _append(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str | None,
) -> list[Row]:
    chain_from = GENESIS_HASH if expected == 0 else tip
    if chain_from is not None:
        rows = _chained_insert(conn, stream_id, expected, prepared, notify, tip=chain_from)
        if rows:
            return rows
    return _append_function(conn, stream_id, expected, prepared, notify)


# Binary results (conn.execute(binary=True)): timestamps and integers cost the server less
# to send and the client less to read. A cursor kept per connection would save ~10 us of
# client CPU per append (about 1.5% of a single append, measured); not worth a
# WeakKeyDictionary of cursors.


def _append_function(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
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
    }
    return conn.execute(_FUNCTION, params, binary=True).fetchall()


def _chained_insert(
    conn: psycopg.Connection[Any],
    stream_id: str,
    expected: int,
    prepared: list[PreparedEvent],
    notify: bool,
    *,
    tip: str,
) -> list[Row]:
    """The append with its chain computed here from ``tip`` (the hash of version
    ``expected``, the genesis hash for a new stream); no rows when the head is not at that
    version with that hash, or when a stream expected not to exist does."""
    prev, elements = tip, []
    for version, event in enumerate(prepared, expected + 1):
        digest = chain_hash(prev, event.body.at(version))
        elements.append(
            f'{{{event.columns_json},"v":{version},"prev":"{prev}","hash":"{digest}"}}'
        )
        prev = digest
    params = {
        "stream": stream_id,
        "expected": expected,
        "tip": tip,
        "version": expected + len(prepared),
        "last_hash": prev,
        "notify": notify,
        "events": f"[{','.join(elements)}]",
    }
    return conn.execute(_CHAINED_INSERT, params, binary=True).fetchall()


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
            rows = _append(conn, stream_id, expected, prepared, notify, tip=tip)
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
