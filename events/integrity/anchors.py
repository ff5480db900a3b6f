"""Whole-log tamper evidence: a chain of signed checkpoints over the log, off the append path.

A stream's hash chain proves its events were not edited, but not that the stream is still
all there, nor that it was not rewritten whole with recomputed hashes, nor that a stream was
not deleted or forged. A checkpoint closes those gaps. Each one covers a *slice* of the
log in the subscriptions' cursor order ``(transaction_id, global_position)``: from the end of
the previous checkpoint's slice up to the last event below the snapshot horizon (the
``pg_snapshot_xmin`` rule that keeps ``read_all`` gap-safe), so no late commit can ever land
inside a slice already anchored. It records, for every stream with events in its slice, how
many and the highest version among them with that event's hash (the head); the previous
checkpoint's hash, which chains the checkpoints; and an HMAC-SHA256 over all of it with a
key kept outside the database. :mod:`events.integrity.anchor_audit` checks the log against them.

Who takes them: :class:`AnchorLoop` in a long-running process (the projector), every few
seconds, and ``sagafleet anchor`` on demand. Two takers at once are serialised by a
transaction-scoped advisory lock (and would meet on the primary key of ``seq``): the second
finds the first's checkpoint and anchors only what came after it. Appends never wait for
any of this; a checkpoint's transaction takes an id only for its short write at the end.

Without a key, checkpoints are still chained: that detects deletion and truncation, but not
a deliberate rewrite by someone who also recomputes the checkpoints.

A taker given a witness file (:mod:`events.integrity.anchor_witness`) records each checkpoint it
takes
there as the high-water mark, and refuses to anchor over a chain that no longer holds the
checkpoint the mark names: deleting the newest checkpoints (or all) and rewriting the log
then stays visible instead of being anchored afresh.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import psycopg

from events.errors import EventStoreError
from events.eventstore.driver import translated_errors
from events.eventstore.hashing import canonical_json
from events.eventstore.model import GENESIS_HASH, Position
from events.eventstore.reading import START, horizon_on
from events.integrity.anchor_witness import (
    AnchorWitness,
    CheckpointChainLowered,
    HighWaterMark,
    PromotionLoss,
    database_identity,
    timeline,
    wal_position,
)

if TYPE_CHECKING:
    from events.eventstore.postgres import EventStore

log = logging.getLogger(__name__)

ANCHOR_LOCK_KEY: Final = int.from_bytes(
    hashlib.sha256(b"eventstore.anchors").digest()[:8], "big", signed=True
)
"""The advisory lock that serialises checkpoint takers (a stable 64-bit key)."""

MIN_KEY_BYTES: Final = 16
"""The shortest signing key accepted: an HMAC key shorter than this is guessable."""


class AnchorKey:
    """The secret that signs checkpoints, kept outside the database; never printed."""

    __slots__ = ("_secret", "key_id")

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_KEY_BYTES:
            raise ValueError(f"an anchor key needs at least {MIN_KEY_BYTES} bytes")
        self._secret = secret
        # Names the key in each checkpoint, so a verifier holding another key can say
        # "signed with another key" rather than "forged". Reveals nothing about the secret.
        self.key_id: str = hashlib.sha256(b"sagafleet anchor key id\0" + secret).hexdigest()[:16]

    def sign(self, anchor_hash: str) -> str:
        """HMAC-SHA256 of a checkpoint's hash, hex."""
        return hmac.new(self._secret, anchor_hash.encode("ascii"), hashlib.sha256).hexdigest()

    def signed(self, anchor_hash: str, signature: str) -> bool:
        """Whether ``signature`` is this key's signature of ``anchor_hash`` (constant time)."""
        return hmac.compare_digest(self.sign(anchor_hash), signature)

    def __repr__(self) -> str:
        return f"AnchorKey(key_id={self.key_id!r})"


@dataclass(frozen=True)
class AnchorHead:
    """A stream in a checkpoint's slice: how many of its events, the highest version, its hash."""

    stream_id: str
    stream_version: int
    events: int
    event_hash: str


@dataclass(frozen=True)
class Checkpoint:
    """One stored checkpoint: the slice ``(after, upto]`` it covers and what it found there."""

    seq: int
    prev_hash: str
    after: Position
    upto: Position
    events: int
    taken_at: datetime
    heads: tuple[AnchorHead, ...]
    anchor_hash: str
    key_id: str | None
    signature: str | None

    @property
    def signed(self) -> bool:
        """Whether a key signed it."""
        return self.signature is not None


def anchor_hash(  # noqa: PLR0913 - the fields of the body, named
    *,
    seq: int,
    prev_hash: str,
    after: Position,
    upto: Position,
    events: int,
    taken_at: datetime,
    heads: Sequence[AnchorHead],
) -> str:
    """sha256 hex of a checkpoint's canonical body: everything it states, heads sorted by
    stream id. The one definition of what a checkpoint's hash (and signature) covers."""
    body = {
        "after": [after.transaction_id, after.global_position],
        "events": events,
        "heads": [
            [h.stream_id, h.stream_version, h.events, h.event_hash]
            for h in sorted(heads, key=lambda h: h.stream_id)
        ],
        "prev_hash": prev_hash,
        "seq": seq,
        "taken_at": taken_at.astimezone(UTC).isoformat(),
        "upto": [upto.transaction_id, upto.global_position],
    }
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


_LAST = """
SELECT seq, anchor_hash, upto_xid::text::bigint, upto_position
  FROM eventstore.anchors ORDER BY seq DESC LIMIT 1
"""

# Per stream in the slice: its event count, highest version and that version's hash. Every
# event of the slice is final (below the horizon), so this statement's snapshot sees them all.
_SLICE_HEADS = """
SELECT stream_id, max(stream_version), count(*),
       (array_agg(event_hash ORDER BY stream_version DESC))[1]
  FROM eventstore.events
 WHERE (transaction_id, global_position) > (%s::text::xid8, %s)
   AND (transaction_id, global_position) <= (%s::text::xid8, %s)
 GROUP BY stream_id
"""

_INSERT = """
INSERT INTO eventstore.anchors (seq, prev_hash, after_xid, after_position, upto_xid,
    upto_position, events, taken_at, anchor_hash, key_id, signature)
VALUES (%s, %s, %s::text::xid8, %s, %s::text::xid8, %s, %s, %s, %s, %s, %s)
"""


_AT_SEQ = "SELECT anchor_hash FROM eventstore.anchors WHERE seq = %s"


def take_checkpoint(
    store: EventStore, key: AnchorKey | None, witness: AnchorWitness | None = None
) -> Checkpoint | None:
    """Anchor everything below the horizon not yet anchored; None when nothing new is final.

    With ``witness``, the checkpoint taken becomes its high-water mark, and a chain that no
    longer holds the marked checkpoint is refused (CheckpointChainLowered), nothing taken —
    unless this server was promoted since the mark was taken (a later WAL timeline): then the
    checkpoint went with the old primary's unreplicated tail, the chain carries on from what
    the new primary holds, and the witness lowers its mark and records the loss.
    Safe to call from several processes at once (they take turns on an advisory lock)."""
    identity = mark = line = None
    if witness is not None:
        with store.connection() as conn:
            identity, line = database_identity(conn), timeline(conn)
        mark = witness.mark(identity)
    with store.transaction() as unit:
        taken, lost = _take_on(unit.connection, key, mark, line)
    if witness is None or identity is None:
        return taken
    # A WAL position read after the commit: the checkpoint is in the log by then.
    with store.connection() as conn:
        at = wal_position(conn)
        newest = (HighWaterMark(taken.seq, taken.anchor_hash, at, line) if taken is not None
                  else _newest_mark(conn, at, line) if lost else None)
    if lost and mark is not None and line is not None:
        loss = PromotionLoss(mark, line, newest.seq if newest else None,
                             datetime.now(UTC).isoformat(timespec="seconds"))
        log.warning("anchor high-water mark lowered: %s", loss)
        witness.lower(identity, newest, loss)
    elif newest is not None:
        witness.advance(identity, newest)
    return taken


def _newest_mark(conn: psycopg.Connection[Any], at: str, line: int | None) -> HighWaterMark | None:
    row = conn.execute(_LAST).fetchone()
    return HighWaterMark(int(row[0]), str(row[1]), at, line) if row else None


def _take_on(
    conn: psycopg.Connection[Any], key: AnchorKey | None, mark: HighWaterMark | None,
    line: int | None,
) -> tuple[Checkpoint | None, bool]:
    """The checkpoint taken (None: nothing new is final) and whether the marked checkpoint
    was lost by a promotion."""
    lost = False
    with translated_errors(context="taking a checkpoint"):
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (ANCHOR_LOCK_KEY,))
        if mark is not None:
            found = conn.execute(_AT_SEQ, (mark.seq,)).fetchone()
            if found is None or found[0] != mark.anchor_hash:
                lost = mark.lost_by_promotion(line)
                if not lost:
                    now = "absent" if found is None else "replaced"
                    raise CheckpointChainLowered(
                        f"the log's checkpoints no longer hold {mark}, the high-water mark"
                        f" kept outside the database ({now}): checkpoints were deleted or"
                        " replaced; not anchoring over them (see `sagafleet verify`)")
        # Read after the lock: a checkpoint another taker just committed is seen here.
        last = conn.execute(_LAST).fetchone()
        seq, prev_hash, after = (
            (int(last[0]) + 1, str(last[1]), Position(int(last[2]), int(last[3])))
            if last
            else (1, GENESIS_HASH, START)
        )
        upto = horizon_on(conn)
        if upto is None or upto <= after:
            return None, lost
        params = (str(after.transaction_id), after.global_position,
                  str(upto.transaction_id), upto.global_position)
        # prepare=False: a custom plan sees the real slice and walks the cursor index (a
        # generic plan may scan the whole log for a slice of a few events).
        heads = tuple(
            AnchorHead(str(row[0]), int(row[1]), int(row[2]), str(row[3]))
            for row in conn.execute(_SLICE_HEADS, params, prepare=False)
        )
        events = sum(h.events for h in heads)
        taken_at = datetime.now(UTC)
        digest = anchor_hash(seq=seq, prev_hash=prev_hash, after=after, upto=upto,
                             events=events, taken_at=taken_at, heads=heads)
        signature = key.sign(digest) if key is not None else None
        key_id = key.key_id if key is not None else None
        conn.execute(_INSERT, (seq, prev_hash, str(after.transaction_id), after.global_position,
                               str(upto.transaction_id), upto.global_position, events,
                               taken_at, digest, key_id, signature))
        with conn.cursor() as cursor, cursor.copy(
            "COPY eventstore.anchor_heads (seq, stream_id, stream_version, events, event_hash)"
            " FROM STDIN"
        ) as copy:
            for h in heads:
                copy.write_row((seq, h.stream_id, h.stream_version, h.events, h.event_hash))
    return Checkpoint(seq, prev_hash, after, upto, events, taken_at, heads, digest, key_id,
                      signature), lost


class AnchorLoop:
    """Takes a checkpoint every ``interval`` seconds until stopped (a long-running process's
    thread). A failed attempt is logged and retried at the next tick: anchoring is evidence,
    never a reason to stop the process that hosts it."""

    def __init__(self, store: EventStore, key: AnchorKey | None, interval: float,
                 witness: AnchorWitness | None = None) -> None:
        """``witness``: where each checkpoint taken is recorded as the high-water mark."""
        if interval <= 0:
            raise ValueError(f"the anchor interval must be positive, got {interval}")
        self._store, self._key, self._interval = store, key, interval
        self._witness = witness
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.taken = 0

    def run(self) -> None:
        """Take checkpoints until :meth:`stop` (blocking)."""
        while not self._stop.wait(self._interval):
            try:
                if take_checkpoint(self._store, self._key, self._witness) is not None:
                    self.taken += 1
            except CheckpointChainLowered as exc:
                log.error("checkpoint not taken: %s", exc)
            except EventStoreError as exc:
                log.warning("checkpoint not taken (next try in %ss): %s", self._interval, exc)

    def start(self) -> AnchorLoop:
        """Run in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="anchor-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and wait for the thread (a checkpoint under way completes or rolls back)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
