"""Checking the log against its checkpoints (see :mod:`events.integrity.anchors`), naming what
differs.

Six checks, each finding names the checkpoint, stream and position it is about:

1. The checkpoints form an unbroken chain (1, 2, 3, … each naming its predecessor's hash,
   each slice starting where the previous one ended), every stored hash matches the
   checkpoint's content, and, with a key, every signature is that key's.
2. Every head a checkpoint names still exists with the same event hash at that version:
   a stream deleted whole, truncated, or rewritten with recomputed hashes fails here.
3. Every slice holds exactly the events its checkpoint counted, stream by stream: an event
   inserted below a checkpoint (a forged stream) or removed from inside one fails here.
4. The checkpoint the high-water mark kept outside the database names
   (:mod:`events.integrity.anchor_witness`) is still there with its hash: the newest checkpoints (or
   all of them) deleted, or the chain replaced, fails here. So does ``expect``, a seq and
   hash kept by hand (what ``sagafleet anchor`` printed).
5. With a key configured, no final event older than ``max_age`` lies after the last
   checkpoint: anchoring runs every few seconds, so such an event means the checkpoints
   covering it were deleted, or nothing has anchored the log for that long.
6. How many events lie after the last checkpoint: not yet anchored, so not yet evidence.

What it proves together with each stream's hash chain (``verify_chain``): the chain ties
every event's content to its stored hash, the checkpoints tie the stored hashes to what was
there when they were taken. Without a key, someone who rewrites the log and recomputes every
checkpoint after it goes unnoticed; the report says so. Check 5 trusts the recording time,
which a rewrite that recomputes every hash can move; check 4 does not depend on it.

``stream_id`` narrows every check to what bears on one stream (a saga's audit): checks 2, 3,
5 and 6 to its events; check 1 to the checkpoints whose slices hold its events or that name
it, and the newest, each against its predecessor; check 4 as it is. Its findings say nothing
of other streams (a tenant's reader sees them), and its cost follows the stream.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg

from events.eventstore.driver import translated_errors
from events.eventstore.model import GENESIS_HASH
from events.eventstore.reading import START, horizon_on
from events.integrity.anchor_reading import (
    broken_heads,
    checkpoint_totals,
    events_after,
    load_checkpoints,
    slice_mismatches,
    stream_checkpoints,
    stream_totals,
    unanchored_old,
)
from events.integrity.anchor_witness import (
    AnchorWitness,
    HighWaterMark,
    PromotionLoss,
    database_identity,
    reached,
    timeline,
    wal_position,
)
from events.integrity.anchors import AnchorKey, Checkpoint, anchor_hash

if TYPE_CHECKING:
    from events.eventstore.postgres import EventStore


class AnchorProblem(enum.StrEnum):
    """What kind of tampering (or mismatch) a finding is."""

    CHECKPOINT_MISSING = "checkpoint_missing"  # a seq is absent: a checkpoint row deleted
    CHECKPOINT_EDITED = "checkpoint_edited"  # its content no longer matches its hash
    CHECKPOINT_CHAIN_BROKEN = "checkpoint_chain_broken"  # prev_hash or slice start wrong
    SIGNATURE_INVALID = "signature_invalid"  # not this key's signature of its hash
    WRONG_KEY = "wrong_key"  # signed by a key other than the one configured
    UNSIGNED = "unsigned"  # no signature although a key is configured
    STREAM_DELETED = "stream_deleted"  # a named stream has no events at all
    STREAM_TRUNCATED = "stream_truncated"  # a named stream ends before the named version
    STREAM_REWRITTEN = "stream_rewritten"  # the event at a named version has another hash
    SLICE_MISMATCH = "slice_mismatch"  # a slice holds other events than were counted
    EXPECTED_CHECKPOINT_ABSENT = "expected_checkpoint_absent"  # --expect-anchor not there
    # The checkpoint the high-water mark names is absent or replaced: the newest deleted.
    BELOW_HIGH_WATER_MARK = "checkpoints_below_high_water_mark"
    # With a key: final events older than the allowed age that no checkpoint covers.
    UNANCHORED_OLD_EVENTS = "unanchored_old_events"


@dataclass(frozen=True)
class AnchorFinding:
    """One way the log and its checkpoints disagree, with where."""

    problem: AnchorProblem
    message: str
    checkpoint: int | None = None
    stream_id: str | None = None
    position: str | None = None


@dataclass(frozen=True)
class AnchorReport:
    """What the anchor check found: the checkpoints, what they cover, every finding."""

    checkpoints: int
    """How many checkpoints the log holds (for one stream's check: the newest seq)."""
    signed: int
    """How many of them are signed (for one stream's: of those bearing on it)."""
    signatures_checked: bool
    key_id: str | None
    last_seq: int | None
    last_hash: str | None
    anchored_upto: str | None
    last_taken_at: datetime | None
    events_anchored: int
    """Events the checkpoints count (for one stream's check: of that stream)."""
    events_not_anchored: int
    findings: list[AnchorFinding] = field(default_factory=list)
    high_water_mark: HighWaterMark | None = None
    """The mark kept outside the database for this database (None: none kept, or no file)."""
    high_water_mark_reached: bool = True
    """False when this server's WAL does not reach the mark yet (a lagging standby): then
    the mark was not checked."""
    database: str = ""
    """The database's identity (system identifier/oid) the witness keys its mark by."""
    reached_mark: HighWaterMark | None = None
    """The newest checkpoint seen, with a WAL position by which it was there: what a clean
    check may record as the new high-water mark."""
    lost_in_promotion: HighWaterMark | None = None
    """The mark, when its checkpoint is absent because this server was promoted since it was
    taken (asynchronous replication's lost tail, not a table write): not a finding."""
    promotion_losses: list[PromotionLoss] = field(default_factory=list)
    """Marks lowered earlier for that reason, as the witness file records them."""

    @property
    def ok(self) -> bool:
        """No finding."""
        return not self.findings

    @property
    def protection(self) -> str:
        """In one phrase, what the checkpoints can prove as configured here."""
        if not self.checkpoints:
            return "no checkpoints yet: nothing is anchored"
        if self.signatures_checked:
            return "signed checkpoints, signatures checked with the configured key"
        if self.signed:
            return ("signed checkpoints, but no key is configured here: signatures NOT "
                    "checked (detects deletion and truncation, not a deliberate recompute)")
        return ("unsigned checkpoints (no key configured): detects deletion and truncation, "
                "not a deliberate recompute")


@dataclass(frozen=True)
class AnchorAge:
    """How old a final event may get unanchored before it is a finding (with a key), as of
    ``now`` (passed in, like every clock this check reads)."""

    max_age: timedelta
    now: datetime


def audit_anchors(  # noqa: PLR0913 - what the check is asked to hold the log to, named
    store: EventStore,
    key: AnchorKey | None,
    *,
    expect: tuple[int, str] | None = None,
    witness: AnchorWitness | None = None,
    age: AnchorAge | None = None,
    stream_id: str | None = None,
) -> AnchorReport:
    """Check the log against its checkpoints (read only). ``expect`` is a (seq, hash) kept
    elsewhere: the checkpoint that must still be there, unchanged; ``witness`` holds the
    high-water mark, which must be too; ``age`` (with a key) how old a final event may get
    unanchored; ``stream_id`` narrows the check to what bears on that stream."""
    with translated_errors(context="checking the checkpoints"), store.connection() as conn:
        identity, line = database_identity(conn), timeline(conn)
        mark = witness.mark(identity) if witness is not None else None
        losses = witness.promotions(identity) if witness is not None else []
        if stream_id is None:
            totals = checkpoint_totals(conn)
            checkpoints, checked = load_checkpoints(conn), None
            newest = totals.last_seq
        else:
            newest, stream_events = stream_totals(conn, stream_id)
            # The checkpoints bearing on the stream and the newest, each with its
            # predecessor (its link); those that must be there (mark, expect) to compare.
            checked = stream_checkpoints(conn, stream_id) | ({newest} if newest else set())
            wanted = checked | {seq - 1 for seq in checked if seq > 1}
            wanted |= {m for m in (mark.seq if mark else None, expect[0] if expect else None)
                       if m is not None}
            checkpoints = load_checkpoints(conn, wanted)
        # Read after the checkpoints: the WAL reaches at least every one of them by now.
        seen_at = wal_position(conn)
        findings = list(_chain_findings(checkpoints, key, checked))
        if expect is not None:
            findings += _witness_findings(checkpoints, expect)
        mark_reached = mark is None or reached(conn, mark)
        lost_mark = None
        if mark is not None and mark_reached:
            below = _mark_findings(checkpoints, mark, newest)
            if below and mark.lost_by_promotion(line):
                lost_mark = mark
            else:
                findings += below
        named = _head_findings(conn, stream_id)
        findings += named
        gone = {f.stream_id for f in named}
        findings += [f for f in _slice_findings(conn, stream_id) if f.stream_id not in gone]
        last = next((c for c in reversed(checkpoints) if c.seq == newest), None)
        if key is not None and age is not None:
            findings += _age_findings(conn, last, age, stream_id)
        not_anchored = events_after(conn, last.upto if last else START, stream_id)
    if checked is None:
        counted, signed, anchored = totals.checkpoints, totals.signed, totals.events
    else:
        counted = newest or 0
        signed = sum(1 for c in checkpoints if c.seq in checked and c.signed)
        anchored = stream_events - not_anchored
    return AnchorReport(
        checkpoints=counted,
        signed=signed,
        signatures_checked=key is not None,
        key_id=key.key_id if key is not None else None,
        last_seq=last.seq if last else None,
        last_hash=last.anchor_hash if last else None,
        anchored_upto=str(last.upto) if last else None,
        last_taken_at=last.taken_at if last else None,
        events_anchored=anchored,
        events_not_anchored=not_anchored,
        findings=findings,
        high_water_mark=mark,
        high_water_mark_reached=mark_reached,
        database=identity,
        reached_mark=HighWaterMark(last.seq, last.anchor_hash, seen_at, line) if last else None,
        lost_in_promotion=lost_mark,
        promotion_losses=losses,
    )


def keep_high_water_mark(witness: AnchorWitness, report: AnchorReport) -> bool:
    """Record the newest checkpoint of a clean report as the high-water mark (the verifier's
    own record); whether the mark moved. A report with findings moves nothing."""
    if not report.ok or not report.database:
        return False
    lost = report.lost_in_promotion
    if lost is not None and report.reached_mark is not None \
            and report.reached_mark.timeline is not None:
        witness.lower(report.database, report.reached_mark, PromotionLoss(
            lost, report.reached_mark.timeline, report.reached_mark.seq,
            datetime.now(UTC).isoformat(timespec="seconds")))
        return True
    if report.reached_mark is None:
        return False
    return witness.advance(report.database, report.reached_mark)


def _chain_findings(
    checkpoints: list[Checkpoint], key: AnchorKey | None, checked: set[int] | None
) -> Iterator[AnchorFinding]:
    """Each checkpoint of ``checked`` (None: every one, all loaded) against its predecessor,
    its own hash and its signature; ``checkpoints`` holds each one's predecessor if stored."""
    by_seq = {c.seq: c for c in checkpoints}
    for c in checkpoints:
        if checked is not None and c.seq not in checked:
            continue
        before = by_seq.get(c.seq - 1)
        if c.seq > 1 and before is None:
            # When all are checked all are loaded, and the gap is known whole.
            if checked is None:
                lower = max((s for s in by_seq if s < c.seq), default=0) + 1
            else:
                lower = c.seq - 1
            missing = (f"checkpoint {c.seq - 1}" if lower == c.seq - 1
                       else f"checkpoints {lower}..{c.seq - 1}")
            yield AnchorFinding(AnchorProblem.CHECKPOINT_MISSING,
                                f"{missing} missing (deleted): the chain jumps to {c.seq}",
                                checkpoint=lower)
        else:
            prev_hash, after = (before.anchor_hash, before.upto) if before else (GENESIS_HASH,
                                                                                 START)
            if c.prev_hash != prev_hash or c.after != after:
                yield AnchorFinding(
                    AnchorProblem.CHECKPOINT_CHAIN_BROKEN,
                    f"checkpoint {c.seq} does not continue checkpoint {c.seq - 1}"
                    " (its predecessor's hash or slice end differs: one of them was replaced)",
                    checkpoint=c.seq, position=str(c.after))
        recomputed = anchor_hash(seq=c.seq, prev_hash=c.prev_hash, after=c.after, upto=c.upto,
                                 events=c.events, taken_at=c.taken_at, heads=c.heads)
        if recomputed != c.anchor_hash:
            yield AnchorFinding(AnchorProblem.CHECKPOINT_EDITED,
                                f"checkpoint {c.seq} was edited: its content (row or heads)"
                                " no longer matches its hash", checkpoint=c.seq)
        if key is not None:
            yield from _signature_findings(c, key)


def _signature_findings(c: Checkpoint, key: AnchorKey) -> Iterator[AnchorFinding]:
    if c.signature is None:
        yield AnchorFinding(AnchorProblem.UNSIGNED,
                            f"checkpoint {c.seq} is unsigned although a key is configured"
                            " (taken before the key was set, or its signature was stripped)",
                            checkpoint=c.seq)
    elif c.key_id != key.key_id:
        yield AnchorFinding(AnchorProblem.WRONG_KEY,
                            f"checkpoint {c.seq} was signed with key {c.key_id}, the configured"
                            f" key is {key.key_id}: wrong key, or a forged signature",
                            checkpoint=c.seq)
    elif not key.signed(c.anchor_hash, c.signature):
        yield AnchorFinding(AnchorProblem.SIGNATURE_INVALID,
                            f"checkpoint {c.seq}: the signature is not the configured key's"
                            " (checkpoint recomputed or forged without the key)",
                            checkpoint=c.seq)


def _witness_findings(
    checkpoints: list[Checkpoint], expect: tuple[int, str]
) -> list[AnchorFinding]:
    seq, digest = expect
    found = next((c for c in checkpoints if c.seq == seq), None)
    if found is not None and found.anchor_hash == digest:
        return []
    now = "absent" if found is None else f"there with hash {found.anchor_hash[:16]}…"
    return [AnchorFinding(AnchorProblem.EXPECTED_CHECKPOINT_ABSENT,
                          f"expected checkpoint {seq} with hash {digest[:16]}…, it is {now}"
                          " (the newest checkpoints were deleted or replaced)", checkpoint=seq)]


def _mark_findings(
    checkpoints: list[Checkpoint], mark: HighWaterMark, newest: int | None
) -> list[AnchorFinding]:
    found = next((c for c in checkpoints if c.seq == mark.seq), None)
    if found is not None and found.anchor_hash == mark.anchor_hash:
        return []
    held = f"checkpoints up to {newest}" if newest else "no checkpoint at all"
    now = "absent" if found is None else f"there with another hash ({found.anchor_hash[:16]}…)"
    return [AnchorFinding(
        AnchorProblem.BELOW_HIGH_WATER_MARK,
        f"the high-water mark kept outside the database says {mark} was taken; it is {now}"
        f" and the log holds {held}: the newest checkpoints were deleted or the chain"
        " replaced", checkpoint=mark.seq)]


def _age_findings(
    conn: psycopg.Connection[Any], last: Checkpoint | None, age: AnchorAge,
    stream_id: str | None,
) -> list[AnchorFinding]:
    horizon = horizon_on(conn)
    if horizon is None:
        return []
    cutoff = age.now - age.max_age
    old = unanchored_old(conn, last.upto if last else START, horizon, cutoff, stream_id)
    if not old.events or old.oldest is None:
        return []
    since = f"after checkpoint {last.seq}" if last is not None else "and no checkpoint exists"
    return [AnchorFinding(
        AnchorProblem.UNANCHORED_OLD_EVENTS,
        f"{old.events} final event(s) recorded before {cutoff.isoformat(timespec='seconds')}"
        f" (the oldest at {old.oldest.isoformat(timespec='seconds')}) lie {since}: the"
        f" checkpoints covering them were deleted, or nothing has anchored the log for"
        f" {int(age.max_age.total_seconds())}s (the projector's anchoring, `sagafleet anchor`)",
        checkpoint=last.seq if last is not None else None, stream_id=old.stream_id,
        position=None if old.position is None else str(old.position))]


def _head_findings(conn: psycopg.Connection[Any], only: str | None) -> list[AnchorFinding]:
    findings: list[AnchorFinding] = []
    seen: set[str] = set()
    for seq, stream_id, version, found_hash, position, now_at in broken_heads(conn, only):
        if stream_id in seen:
            continue  # the newest checkpoint naming the stream says enough
        seen.add(stream_id)
        where = f"stream {stream_id!r}: checkpoint {seq} named version {version}"
        if now_at is None:
            problem, text = AnchorProblem.STREAM_DELETED, f"{where}; the stream is gone"
        elif found_hash is None:
            problem = AnchorProblem.STREAM_TRUNCATED
            text = f"{where}; the stream now ends at version {now_at}"
        else:
            problem = AnchorProblem.STREAM_REWRITTEN
            text = f"{where}; the event there now has another hash (rewritten)"
        findings.append(AnchorFinding(problem, text, checkpoint=int(seq), stream_id=stream_id,
                                      position=None if position is None else str(position)))
    return findings


def _slice_findings(conn: psycopg.Connection[Any], only: str | None) -> list[AnchorFinding]:
    findings = []
    for seq, stream_id, counted, named, found, version, first in slice_mismatches(conn, only):
        if counted is None:
            text = (f"stream {stream_id!r} has {found} event(s) in checkpoint {seq}'s slice"
                    f" (up to version {version}) that the checkpoint does not name:"
                    " inserted below a checkpoint")
        else:
            text = (f"stream {stream_id!r}: checkpoint {seq} counted {counted} event(s) up to"
                    f" version {named} in its slice, the log now holds {found or 0}"
                    + (f" up to version {version}" if version is not None else ""))
        findings.append(AnchorFinding(AnchorProblem.SLICE_MISMATCH, text, checkpoint=int(seq),
                                      stream_id=str(stream_id),
                                      position=None if first is None else str(first)))
    return findings
