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

    def __str__(self) -> str:
        return f"checkpoint {self.seq} ({self.anchor_hash[:16]}…)"


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
                marks = self._read()
                known = marks.get(identity)
                if known is not None and known.seq >= mark.seq:
                    return False
                marks[identity] = mark
                self._write(marks)
        except OSError as exc:
            raise AnchorWitnessError(
                f"the anchor witness {self.path} cannot be written: {exc}") from None
        return True

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
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise AnchorWitnessError(
                f"the anchor witness {self.path} cannot be read: {exc}") from None
        try:
            doc = json.loads(text)
            return {
                str(identity): HighWaterMark(int(m["seq"]), str(m["anchor_hash"]), str(m["wal"]))
                for identity, m in doc["marks"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError):
            raise AnchorWitnessError(
                f"{self.path} is not an anchor witness file (fix or remove it)") from None

    def _write(self, marks: dict[str, HighWaterMark]) -> None:
        doc = {"marks": {identity: {"seq": m.seq, "anchor_hash": m.anchor_hash, "wal": m.wal}
                         for identity, m in sorted(marks.items())}}
        draft = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            with open(draft, "w", encoding="utf-8") as out:
                json.dump(doc, out, indent=2, sort_keys=True)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(draft, self.path)
        finally:
            draft.unlink(missing_ok=True)
