"""Snapshots of saga state beside the log: where a load starts folding, never the truth.

A snapshot holds a saga's state folded up to a stream version (``saga_core.engine.state_codec``
encodes it), the schema fingerprint of the code that wrote it, the hash of the definition
the state runs, and its **seal**: the hash of the event it folds up to, and the hash of its
state as the store keeps it (the exact text: PostgreSQL hashes its jsonb text when it
stores the row, and a read hashes the text it gets back before decoding it, so no canonical
form is computed on either side). A load reads, in one query, the stream's first event, the
snapshot of this schema (if any) and the events from the snapshot's version on; it folds
only those after it. A snapshot that does not check out (:func:`snapshot_problem`: no event
at its version, another event there than it was taken at, a state that does not match its
hash; then another definition, a state that does not decode or is not at its version) is
ignored and the whole stream is folded instead: the log stays the only truth, and every
snapshot can be dropped (:meth:`Snapshots.drop_snapshots`, ``sagafleet db drop-snapshots``)
at any time without losing anything but speed.

The seal catches a snapshot edited in place, or left behind by a log rewritten under it.
It is no signature: someone who edits a state and recomputes its hash gets it loaded, which
is why ``sagafleet verify`` (and ``audit``) re-fold every snapshot and compare
(:mod:`events.integrity.snapshot_audit`).

Writes are upserts that keep the newest snapshot per stream (or replace one another schema
wrote, or one beyond the stream's head), outside any unit of work: a snapshot never waits
on, or for, an append.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg.types.json import Jsonb

from events.eventstore.driver import EVENT_COLUMNS, stored_event_row
from events.eventstore.model import RecordedEvent
from events.eventstore.reading import checked_stream_id
from events.eventstore.rules import checked_stream_list


@dataclass(frozen=True)
class StoredSnapshot:
    """A saga stream's state as a JSON document at ``version``, for a definition by hash,
    taken at the event whose hash is ``event_hash`` (the one at ``version``).

    ``state_intact``, on a snapshot read back: whether the stored state still matches the
    hash its store sealed it with when it was written (on a snapshot to write: True)."""

    stream_id: str
    version: int
    definition_hash: str
    state: Any
    event_hash: str
    state_intact: bool = True


def text_hash(text: str) -> str:
    """sha256 hex of a state's stored text (what ``eventstore.snapshots.state_hash`` holds:
    the server computes the same of its jsonb text, ``sha256(convert_to(state::text,
    'UTF8'))``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_decode_state_text = json.JSONDecoder().decode


def snapshot_problem(snapshot: StoredSnapshot, at_version: RecordedEvent | None) -> str | None:
    """Why a snapshot's seal does not hold against the event now at its version (None: no
    such event); None when it holds."""
    if at_version is None:
        return f"the stream has no event at version {snapshot.version}"
    if at_version.event_hash != snapshot.event_hash:
        return (f"it was taken at another event than the one now at version"
                f" {snapshot.version} (the log or the snapshot was changed)")
    if not snapshot.state_intact:
        return "its state does not match its hash (edited after it was taken)"
    return None


@dataclass(frozen=True)
class SnapshotRead:
    """What a snapshot load read of one stream: the snapshot of the asked schema (None:
    none), and the stream's events that a fold from it needs: the first (SagaStarted), the
    one at the snapshot's version (the head when nothing followed) and every later one;
    the whole stream when there is no snapshot."""

    snapshot: StoredSnapshot | None
    records: list[RecordedEvent]

    def after_snapshot(self) -> list[RecordedEvent]:
        """The records a fold from the snapshot folds (all of them without one)."""
        if self.snapshot is None:
            return self.records
        return [r for r in self.records if r.stream_version > self.snapshot.version]


class Snapshots(Protocol):
    """Where a saga log keeps its snapshots (PostgreSQL, or in memory for the test kit)."""

    def read_from_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, SnapshotRead]:
        """Each stream id to its snapshot of ``schema`` and the events a fold from it needs."""
        ...

    def save_snapshot(self, snapshot: StoredSnapshot, schema: str) -> None:
        """Keep ``snapshot`` unless the stream has a newer one of the same ``schema`` (one
        beyond the stream's head, say from a partial restore, is not newer: it goes)."""
        ...

    def read_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, StoredSnapshot]:
        """The snapshot of ``schema`` of each stream that has one, as stored (for checks
        that re-fold them: no events are read)."""
        ...

    def drop_snapshots(self) -> int:
        """Forget every snapshot (a rebuild); return how many there were."""
        ...


# One round trip per load: for each stream, its snapshot of the schema (or none) drives
# two index range reads, so events before the snapshot are never touched.
_READ_FROM_SNAPSHOTS = """
WITH wanted AS (
  SELECT w.id AS s_stream, s.version AS s_version, s.definition_hash AS s_hash,
         s.event_hash AS s_event_hash, s.state_hash AS s_state_hash,
         s.state::text AS s_state
    FROM {streams}
    LEFT JOIN eventstore.snapshots s ON s.stream_id = w.id AND s.schema = %(schema)s)
SELECT {columns}, s_version, s_hash, s_event_hash, s_state_hash,
       CASE WHEN stream_version = 1 THEN s_state END
  FROM wanted CROSS JOIN LATERAL (
       SELECT * FROM eventstore.events
        WHERE stream_id = s_stream AND stream_version = 1
       UNION ALL
       SELECT * FROM eventstore.events
        WHERE stream_id = s_stream AND stream_version >= greatest(coalesce(s_version, 0), 2)
  ) AS e
 ORDER BY stream_id, stream_version
"""
# One stream (every load) by a scalar parameter: PostgreSQL then reuses one generic plan of
# the prepared statement. An array's length enters the custom plans' estimates, so with an
# array it plans each call anew (~0.3 ms: half again a short saga's plain read).
_READ_ONE = _READ_FROM_SNAPSHOTS.format(
    streams="(VALUES (%(stream)s::text)) AS w(id)", columns=EVENT_COLUMNS)
_READ_MANY = _READ_FROM_SNAPSHOTS.format(
    streams="unnest(%(streams)s::text[]) AS w(id)", columns=EVENT_COLUMNS)

# The state's hash is the server's, of the text it keeps (the document as jsonb prints it).
_SAVE = """
INSERT INTO eventstore.snapshots AS s
       (stream_id, version, schema, definition_hash, state, event_hash, state_hash, taken_at)
SELECT %s, %s, %s, %s, doc.state, %s,
       encode(sha256(convert_to(doc.state::text, 'UTF8')), 'hex'), now()
  -- No wait for the WAL flush, for this statement's own transaction alone: a crash can
  -- lose only the last snapshots written, which costs a longer fold, never a fact.
  FROM (SELECT %s::jsonb AS state) AS doc, set_config('synchronous_commit', 'off', true)
ON CONFLICT (stream_id) DO UPDATE
   SET version = excluded.version, schema = excluded.schema,
       definition_hash = excluded.definition_hash, state = excluded.state,
       event_hash = excluded.event_hash, state_hash = excluded.state_hash,
       taken_at = excluded.taken_at
 WHERE s.schema <> excluded.schema OR s.version <= excluded.version
    OR s.version > (SELECT h.version FROM eventstore.streams h WHERE h.stream_id = s.stream_id)
"""

_DROP = "DELETE FROM eventstore.snapshots"

_STORED = """
SELECT stream_id, version, definition_hash, state::text, event_hash, state_hash
  FROM eventstore.snapshots WHERE stream_id = ANY(%s) AND schema = %s
"""


class Connections(Protocol):
    """What the PostgreSQL snapshots need of the event store: a pooled connection."""

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """Lend a pooled autocommit connection for the block."""
        ...

    def remember_head(self, stream_id: str, event: RecordedEvent) -> None:
        """Note a stream's latest event read by another query (for the next append)."""
        ...


class PostgresSnapshots:
    """Snapshots in ``eventstore.snapshots`` (migrations 0010, 0012), one per stream."""

    def __init__(self, store: Connections) -> None:
        self.store = store

    def read_from_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, SnapshotRead]:
        """Each stream id (duplicates once) to its snapshot and the events after it, in one
        query; a stream with no events reads as no snapshot and no records."""
        wanted = list(dict.fromkeys(checked_stream_id(s) for s in checked_stream_list(stream_ids)))
        snapshots: dict[str, StoredSnapshot | None] = dict.fromkeys(wanted)
        records: dict[str, list[RecordedEvent]] = {stream_id: [] for stream_id in wanted}
        with self.store.connection() as conn, conn.cursor(binary=True) as cur:
            if len(wanted) == 1:
                cur.execute(_READ_ONE, {"stream": wanted[0], "schema": schema})
            else:
                cur.execute(_READ_MANY, {"streams": wanted, "schema": schema})
            for row in cur:
                event = stored_event_row(row[:-5])
                version, definition_hash, event_hash, sealed, text = row[-5:]
                if text is not None:
                    snapshots[event.stream_id] = _snapshot(
                        event.stream_id, version, definition_hash, text, event_hash, sealed)
                records[event.stream_id].append(event)
        for stream_id, read in records.items():
            if read:
                self.store.remember_head(stream_id, read[-1])
        return {s: SnapshotRead(snapshots[s], records[s]) for s in wanted}

    def save_snapshot(self, snapshot: StoredSnapshot, schema: str) -> None:
        """Upsert the stream's snapshot (a newer one of the same schema, within the
        stream, stays), in one round trip that waits for no disk flush (see _SAVE)."""
        with self.store.connection() as conn:
            conn.execute(_SAVE, (snapshot.stream_id, snapshot.version, schema,
                                 snapshot.definition_hash, snapshot.event_hash,
                                 Jsonb(snapshot.state)))

    def read_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, StoredSnapshot]:
        """The snapshot of ``schema`` of each stream that has one, as stored, in one query."""
        wanted = [checked_stream_id(s) for s in checked_stream_list(stream_ids)]
        with self.store.connection() as conn:
            rows = conn.execute(_STORED, (wanted, schema)).fetchall()
        return {str(r[0]): _snapshot(str(r[0]), int(r[1]), str(r[2]), r[3], str(r[4]), r[5])
                for r in rows}

    def drop_snapshots(self) -> int:
        """Delete every snapshot; return how many there were."""
        with self.store.connection() as conn:
            return conn.execute(_DROP).rowcount


def _snapshot(  # noqa: PLR0913, PLR0917 - a stored row's columns, in order
    stream_id: str, version: int, definition_hash: str, text: str, event_hash: str,
    sealed: str,
) -> StoredSnapshot:
    """A stored row as a snapshot: its state's text checked against the hash the server
    sealed it with, then decoded (the text is hashed as it came, before any parsing)."""
    return StoredSnapshot(stream_id, version, definition_hash, _decode_state_text(text),
                          event_hash, text_hash(text) == sealed)
