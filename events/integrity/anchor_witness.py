"""The checkpoint high-water mark: the newest checkpoint known to exist, kept outside the database.

Signed checkpoints chain to one another (each signs its number and its predecessor's hash),
so none can be forged, renumbered or removed from the middle of the chain unseen. What no
content of the database can show is the *newest* checkpoints deleted, or all of them: the
chain that is left still verifies, and a checkpoint taker would even start it afresh over a
rewritten log. Someone with only table access can do that; they cannot touch a file on
another machine. So every checkpoint taker (the projector's anchoring, ``sagafleet anchor``)
and every clean ``verify`` write down the newest checkpoint they saw — its number, its hash,
and a WAL position by which it was committed — in a **witness file**
(``SAGAFLEET_ANCHOR_WITNESS_FILE``, by default ``SAGAFLEET_HOME/anchor.witness``). The mark
only moves forward. ``verify`` and ``audit`` then require that checkpoint, with that hash,
in the log (``checkpoints_below_high_water_mark`` otherwise), and a taker refuses to anchor
over a chain that no longer holds it (:class:`CheckpointChainLowered`): it would otherwise
launder the rewrite into fresh checkpoints.

A file holds one mark per database, keyed by what no table write can change: the cluster's
system identifier and the database's oid (a database dropped and created again, or a new
cluster, is another database, with no mark yet). The WAL position lets a hot standby that
has not replayed that far yet say "not reached", not "deleted".

A mark also records the WAL timeline it was taken on. A standby promoted to primary starts a
new timeline; with asynchronous replication, what the old primary wrote after the standby's
last replayed record — checkpoints included — is not on the new one. A marked checkpoint
absent from a server on a *later* timeline was lost with that replication lag, not deleted by
a table write (no table write moves the timeline): verify reports it as
:attr:`~events.integrity.anchor_audit.AnchorReport.lost_in_promotion`, not as tampering, and
the next taker (or clean verify) lowers the mark to the chain the new primary holds,
recording the loss in the file's ``promotions`` list, which ``verify`` keeps showing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg

from events.errors import EventStoreError
from saga_core.errors import ErrorKind

WITNESS_FILE: Final = "anchor.witness"
"""The witness file's name under SAGAFLEET_HOME when no other path is configured."""

# The cluster's identity and the database's: neither can be changed by writing to tables.
_IDENTITY = """
SELECT (SELECT system_identifier FROM pg_control_system())::text || '/'
       || (SELECT oid FROM pg_database WHERE datname = current_database())::text
"""
# Where pg_control_system() is not granted (some managed services): the database's oid
# alone, still beyond a table write's reach.
_DATABASE_ONLY = """
SELECT 'cluster?/' || (SELECT oid FROM pg_database WHERE datname = current_database())::text
"""

# How far this server's WAL goes: written (a primary) or replayed (a hot standby).
_WAL_AT = """
SELECT coalesce(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                     ELSE pg_current_wal_lsn() END, '0/0')::text
"""

# The timeline of a primary's WAL (the first 8 hex digits of its WAL file's name); a standby
# in recovery has none of its own yet: NULL.
_TIMELINE = """
SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END
"""

_REACHED = """
SELECT coalesce(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                     ELSE pg_current_wal_lsn() END, '0/0') >= %s::text::pg_lsn
"""


class AnchorWitnessError(EventStoreError):
    """The witness file cannot be read as one (edited, or another file there), or written."""

    kind = ErrorKind.MISCONFIGURED


class CheckpointChainLowered(EventStoreError):
    """The log's checkpoints no longer hold the one the high-water mark records: a taker
    refuses to anchor over them (that would hide the deletion)."""

    kind = ErrorKind.INTEGRITY


@dataclass(frozen=True)
class HighWaterMark:
    """The newest checkpoint known to exist: its seq and hash, and a WAL position of the
    database by which it was committed."""

    seq: int
    anchor_hash: str
    wal: str
    timeline: int | None = None
    """The WAL timeline the mark was taken on (None: a standby's, or a mark from before
    timelines were recorded)."""

    def __str__(self) -> str:
        return f"checkpoint {self.seq} ({self.anchor_hash[:16]}…)"

    def lost_by_promotion(self, timeline_now: int | None) -> bool:
        """Whether a server on ``timeline_now`` was promoted since this mark was taken: then
        the marked checkpoint, if absent, went with the old primary's unreplicated tail."""
        return (self.timeline is not None and timeline_now is not None
                and timeline_now > self.timeline)


@dataclass(frozen=True)
class PromotionLoss:
    """A mark lowered because the checkpoint it named was lost when a standby was promoted."""

    lost: HighWaterMark
    timeline: int
    """The new primary's timeline, where the lowering happened."""
    lowered_to: int | None
    """The checkpoint the mark was lowered to (None: the new primary held none)."""
    at: str
    """When the mark was lowered (ISO 8601, UTC)."""

    def __str__(self) -> str:
        to = f"checkpoint {self.lowered_to}" if self.lowered_to else "no checkpoint"
        return (f"{self.lost} (timeline {self.lost.timeline}) was lost when a standby was"
                f" promoted (timeline {self.timeline}); the mark was lowered to {to} at"
                f" {self.at}")


def database_identity(conn: psycopg.Connection[Any]) -> str:
    """``system identifier/database oid``: which database a mark is about. On an autocommit
    connection (a refused statement ends no transaction of the caller's)."""
    try:
        row = conn.execute(_IDENTITY).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        row = conn.execute(_DATABASE_ONLY).fetchone()
    return str(row[0]) if row else ""


def wal_position(conn: psycopg.Connection[Any]) -> str:
    """How far the server's WAL goes now (a primary's written, a standby's replayed)."""
    row = conn.execute(_WAL_AT).fetchone()
    return str(row[0]) if row else "0/0"


def timeline(conn: psycopg.Connection[Any]) -> int | None:
    """The primary's WAL timeline (one more at each standby promotion); None on a standby."""
    row = conn.execute(_TIMELINE).fetchone()
    return int(str(row[0])[:8], 16) if row and row[0] else None


def reached(conn: psycopg.Connection[Any], mark: HighWaterMark) -> bool:
    """Whether the server's WAL goes as far as the mark's (a lagging standby may not yet)."""
    row = conn.execute(_REACHED, (mark.wal,)).fetchone()
    return bool(row and row[0])


class AnchorWitness:
    """The high-water marks in one file, by database identity; only ever raised."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self, identity: str) -> HighWaterMark | None:
        """The mark recorded for a database; None when the file or the entry does not exist.
        AnchorWitnessError when the file is not a witness file."""
        return self._read().get(identity)

    def advance(self, identity: str, mark: HighWaterMark) -> bool:
        """Record ``mark`` for a database unless a mark at least as high is there already;
        whether it was recorded. Writers on one machine take turns on a lock file, and the
        file is replaced whole, so a reader never sees half of it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._locked():
                doc = self._document()
                known = doc.marks.get(identity)
                if known is not None and known.seq >= mark.seq:
                    return False
                doc.marks[identity] = mark
                self._write(doc)
        except OSError as exc:
            raise AnchorWitnessError(
                f"the anchor witness {self.path} cannot be written: {exc}") from None
        return True

    def lower(self, identity: str, mark: HighWaterMark | None, loss: PromotionLoss) -> None:
        """After a promotion lost the marked checkpoint: replace the mark with ``mark`` (the
        newest checkpoint the new primary holds; None: none) and record the loss. Only for a
        mark :meth:`HighWaterMark.lost_by_promotion` says a promotion lost."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._locked():
                doc = self._document()
                known = doc.marks.get(identity)
                if known != loss.lost:
                    return  # another process lowered (or raised) it meanwhile
                if mark is None:
                    doc.marks.pop(identity, None)
                else:
                    doc.marks[identity] = mark
                doc.promotions.setdefault(identity, []).append(loss)
                self._write(doc)
        except OSError as exc:
            raise AnchorWitnessError(
                f"the anchor witness {self.path} cannot be written: {exc}") from None

    def promotions(self, identity: str) -> list[PromotionLoss]:
        """Every mark lowered after a promotion lost it, oldest first."""
        return list(self._document().promotions.get(identity, []))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.path.with_name(f".{self.path.name}.lock")
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _read(self) -> dict[str, HighWaterMark]:
        return self._document().marks

    def _document(self) -> _Document:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return _Document({}, {})
        except OSError as exc:
            raise AnchorWitnessError(
                f"the anchor witness {self.path} cannot be read: {exc}") from None
        try:
            doc = json.loads(text)
            marks = {str(identity): _mark(m) for identity, m in doc["marks"].items()}
            promotions = {
                str(identity): [
                    PromotionLoss(_mark(p["lost"]), int(p["timeline"]),
                                  None if p["lowered_to"] is None else int(p["lowered_to"]),
                                  str(p["at"]))
                    for p in losses]
                for identity, losses in doc.get("promotions", {}).items()
            }
        except (ValueError, KeyError, TypeError, AttributeError):
            raise AnchorWitnessError(
                f"{self.path} is not an anchor witness file (fix or remove it)") from None
        return _Document(marks, promotions)

    def _write(self, doc: _Document) -> None:
        out_doc: dict[str, Any] = {
            "marks": {identity: _mark_json(m) for identity, m in sorted(doc.marks.items())}}
        if doc.promotions:
            out_doc["promotions"] = {
                identity: [{"lost": _mark_json(p.lost), "timeline": p.timeline,
                            "lowered_to": p.lowered_to, "at": p.at} for p in losses]
                for identity, losses in sorted(doc.promotions.items())}
        draft = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            with open(draft, "w", encoding="utf-8") as out:
                json.dump(out_doc, out, indent=2, sort_keys=True)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(draft, self.path)
        finally:
            draft.unlink(missing_ok=True)


@dataclass
class _Document:
    marks: dict[str, HighWaterMark]
    promotions: dict[str, list[PromotionLoss]]


def _mark(m: dict[str, Any]) -> HighWaterMark:
    line = m.get("timeline")
    return HighWaterMark(int(m["seq"]), str(m["anchor_hash"]), str(m["wal"]),
                         None if line is None else int(line))


def _mark_json(m: HighWaterMark) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": m.seq, "anchor_hash": m.anchor_hash, "wal": m.wal}
    if m.timeline is not None:
        out["timeline"] = m.timeline
    return out
