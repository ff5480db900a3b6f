"""What the anchor check reads: checkpoints, and how the log stands against them, for the whole
log or for one stream (``stream_id``; None: every stream).

The whole log is read as it is (every checkpoint, every head, every slice joined to its
events). One stream's check (a saga's audit) reads only what bears on it, so its cost grows
with the stream and not with the log: the checkpoints whose slices hold its events (found
through the index on each slice's end, events migration 0013) and those that name it.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from events.eventstore.model import Position
from events.integrity.anchors import AnchorHead, Checkpoint

_ANCHORS = """
SELECT seq, prev_hash, after_xid::text::bigint, after_position, upto_xid::text::bigint,
       upto_position, events, taken_at, anchor_hash, key_id, signature
  FROM eventstore.anchors
 WHERE %(seqs)s::bigint[] IS NULL OR seq = ANY(%(seqs)s::bigint[])
 ORDER BY seq
"""

_HEADS = """
SELECT seq, stream_id, stream_version, events, event_hash
  FROM eventstore.anchor_heads
 WHERE %(seqs)s::bigint[] IS NULL OR seq = ANY(%(seqs)s::bigint[])
 ORDER BY seq, stream_id
"""

_TOTALS = """
SELECT count(*), count(signature), coalesce(sum(events), 0), max(seq) FROM eventstore.anchors
"""

# One stream's share, without reading every checkpoint: the newest seq (the primary key's
# last entry) and the stream's events.
_STREAM_TOTALS = """
SELECT (SELECT max(seq) FROM eventstore.anchors),
       (SELECT count(*) FROM eventstore.events WHERE stream_id = %(stream)s)
"""

# The checkpoint whose slice ends at or after an event: the one holding it, when the chain is
# whole (slices are contiguous); when the one before was deleted, the one after the gap.
_COVERING = """
CROSS JOIN LATERAL (
    SELECT a.seq, a.after_xid, a.after_position FROM eventstore.anchors a
     WHERE (a.upto_xid, a.upto_position) >= (e.transaction_id, e.global_position)
     ORDER BY a.upto_xid, a.upto_position LIMIT 1) a"""

_STREAM_CHECKPOINTS = f"""
SELECT a.seq FROM eventstore.events e {_COVERING} WHERE e.stream_id = %(stream)s
UNION
SELECT seq FROM eventstore.anchor_heads WHERE stream_id = %(stream)s
"""  # noqa: S608 - _COVERING is a constant

# Named heads the log no longer backs, with how far the stream goes now (NULL: no events).
_BROKEN_HEADS = """
SELECT h.seq, h.stream_id, h.stream_version, e.event_hash, e.global_position,
       (SELECT max(x.stream_version) FROM eventstore.events x WHERE x.stream_id = h.stream_id)
  FROM eventstore.anchor_heads h
  LEFT JOIN eventstore.events e
         ON e.stream_id = h.stream_id AND e.stream_version = h.stream_version
 WHERE e.event_hash IS DISTINCT FROM h.event_hash
   AND (%(stream)s::text IS NULL OR h.stream_id = %(stream)s)
 ORDER BY h.stream_id, h.seq DESC
"""

# Each checkpoint's slice as the log holds it now, per stream, next to what was counted.
_SLICES = """
WITH found AS ({found}), named AS (
    SELECT h.* FROM eventstore.anchor_heads h JOIN eventstore.anchors a ON a.seq = h.seq
     WHERE (%(stream)s::text IS NULL OR h.stream_id = %(stream)s)
)
SELECT coalesce(f.seq, n.seq), coalesce(f.stream_id, n.stream_id), n.events,
       n.stream_version, f.events, f.version, f.first_position
  FROM found f FULL JOIN named n ON n.seq = f.seq AND n.stream_id = f.stream_id
 WHERE n.events IS DISTINCT FROM f.events OR n.stream_version IS DISTINCT FROM f.version
 ORDER BY 1, 2
"""
_FOUND_ALL = """
    SELECT a.seq, e.stream_id, count(*) AS events, max(e.stream_version) AS version,
           min(e.global_position) AS first_position
      FROM eventstore.anchors a
      JOIN eventstore.events e
        ON (e.transaction_id, e.global_position) > (a.after_xid, a.after_position)
       AND (e.transaction_id, e.global_position) <= (a.upto_xid, a.upto_position)
     GROUP BY a.seq, e.stream_id"""
_FOUND_ONE = f"""
    SELECT a.seq, e.stream_id, count(*) AS events, max(e.stream_version) AS version,
           min(e.global_position) AS first_position
      FROM eventstore.events e {_COVERING}
     WHERE e.stream_id = %(stream)s
       AND (e.transaction_id, e.global_position) > (a.after_xid, a.after_position)
     GROUP BY a.seq, e.stream_id"""  # noqa: S608 - _COVERING is a constant
_SLICES_ALL = _SLICES.format(found=_FOUND_ALL)
_SLICES_ONE = _SLICES.format(found=_FOUND_ONE)

_AFTER = """
SELECT count(*) FROM eventstore.events
 WHERE (transaction_id, global_position) > (%(xid)s::text::xid8, %(position)s)
   AND (%(stream)s::text IS NULL OR stream_id = %(stream)s)
"""

# Final events (at or below the horizon) after the last checkpoint recorded before the cutoff:
# how many, the oldest time, and the first of them in cursor order.
_UNANCHORED_OLD = """
SELECT count(*), min(recorded_at),
       (array_agg(stream_id ORDER BY transaction_id, global_position))[1],
       (array_agg(global_position ORDER BY transaction_id, global_position))[1]
  FROM eventstore.events
 WHERE (transaction_id, global_position) > (%(xid)s::text::xid8, %(position)s)
   AND (transaction_id, global_position) <= (%(upto_xid)s::text::xid8, %(upto_position)s)
   AND recorded_at < %(cutoff)s
   AND (%(stream)s::text IS NULL OR stream_id = %(stream)s)
"""


class CheckpointTotals(NamedTuple):
    """How many checkpoints the log holds, how many are signed, the events they count and
    the highest seq (None: no checkpoint)."""

    checkpoints: int
    signed: int
    events: int
    last_seq: int | None


class BrokenHead(NamedTuple):
    """A head a checkpoint names that the log no longer backs (``now_at`` None: no events)."""

    seq: int
    stream_id: str
    stream_version: int
    found_hash: str | None
    position: int | None
    now_at: int | None


class SliceMismatch(NamedTuple):
    """A stream whose events in a checkpoint's slice differ from what it counted (``counted``
    None: events it does not name)."""

    seq: int
    stream_id: str
    counted: int | None
    named_version: int | None
    found: int | None
    found_version: int | None
    first_position: int | None


class UnanchoredOld(NamedTuple):
    """Final events past the last checkpoint recorded before a cutoff: how many, the oldest
    time, and where the first of them is."""

    events: int
    oldest: datetime | None
    stream_id: str | None
    position: int | None


def load_checkpoints(
    conn: psycopg.Connection[Any], seqs: Collection[int] | None = None
) -> list[Checkpoint]:
    """The stored checkpoints (every one, or those of ``seqs``) in seq order, with their heads
    (orphan heads are left out)."""
    wanted = {"seqs": None if seqs is None else sorted(seqs)}
    heads: dict[int, list[AnchorHead]] = {}
    for seq, stream_id, version, events, event_hash in conn.execute(_HEADS, wanted):
        heads.setdefault(int(seq), []).append(
            AnchorHead(str(stream_id), int(version), int(events), str(event_hash)))
    return [
        Checkpoint(int(r[0]), str(r[1]), Position(int(r[2]), int(r[3])),
                   Position(int(r[4]), int(r[5])), int(r[6]), r[7],
                   tuple(heads.get(int(r[0]), ())), str(r[8]), r[9], r[10])
        for r in conn.execute(_ANCHORS, wanted)
    ]


def checkpoint_totals(conn: psycopg.Connection[Any]) -> CheckpointTotals:
    """How many checkpoints there are, signed, and the events they count."""
    row = conn.execute(_TOTALS).fetchone()
    if row is None:
        return CheckpointTotals(0, 0, 0, None)
    return CheckpointTotals(int(row[0]), int(row[1]), int(row[2]),
                            None if row[3] is None else int(row[3]))


def stream_totals(conn: psycopg.Connection[Any], stream_id: str) -> tuple[int | None, int]:
    """The newest checkpoint's seq (None: none) and how many events one stream holds."""
    row = conn.execute(_STREAM_TOTALS, {"stream": stream_id}).fetchone()
    if row is None:
        return None, 0
    return (None if row[0] is None else int(row[0])), int(row[1])


def stream_checkpoints(conn: psycopg.Connection[Any], stream_id: str) -> set[int]:
    """The checkpoints that bear on one stream: those whose slices hold (or, past a gap,
    follow) its events, and those that name it."""
    return {int(r[0]) for r in conn.execute(_STREAM_CHECKPOINTS, {"stream": stream_id})}


def broken_heads(conn: psycopg.Connection[Any], stream_id: str | None) -> list[BrokenHead]:
    """Heads the log no longer backs, newest checkpoint first per stream."""
    return [BrokenHead(int(r[0]), str(r[1]), int(r[2]), r[3], r[4], r[5])
            for r in conn.execute(_BROKEN_HEADS, {"stream": stream_id})]


def slice_mismatches(
    conn: psycopg.Connection[Any], stream_id: str | None
) -> list[SliceMismatch]:
    """Every (checkpoint, stream) whose slice holds other events than were counted."""
    statement = _SLICES_ALL if stream_id is None else _SLICES_ONE
    return [SliceMismatch(int(r[0]), str(r[1]), r[2], r[3], r[4], r[5], r[6])
            for r in conn.execute(statement, {"stream": stream_id})]


def events_after(conn: psycopg.Connection[Any], after: Position, stream_id: str | None) -> int:
    """How many events lie after ``after`` in cursor order (of one stream, with one)."""
    row = conn.execute(_AFTER, {"xid": str(after.transaction_id),
                                "position": after.global_position, "stream": stream_id}
                       ).fetchone()
    return int(row[0]) if row else 0


def unanchored_old(
    conn: psycopg.Connection[Any], after: Position, horizon: Position, cutoff: datetime,
    stream_id: str | None,
) -> UnanchoredOld:
    """Final events after ``after`` up to ``horizon`` recorded before ``cutoff``."""
    row = conn.execute(_UNANCHORED_OLD, {
        "xid": str(after.transaction_id), "position": after.global_position,
        "upto_xid": str(horizon.transaction_id), "upto_position": horizon.global_position,
        "cutoff": cutoff, "stream": stream_id}).fetchone()
    if row is None:
        return UnanchoredOld(0, None, None, None)
    return UnanchoredOld(int(row[0]), row[1], row[2], row[3])

