"""Test helper: a PostgreSQL primary and a hot standby streaming from it, both started here.

The primary is a fresh ``initdb`` cluster (the machine's own server may not allow
replication connections); the standby is ``pg_basebackup -R`` of it, started on its own
socket. Both listen on a unix socket in their data directory only, as the system-binaries
embedded cluster does (:mod:`sagafleet.system_postgres`, whose binaries and user rules this
reuses). :func:`standby_pair` skips, saying why, only where no ``pg_basebackup`` exists.
"""

from __future__ import annotations

import os
import pwd
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from sagafleet.system_postgres import Control, find_bin_dir, run_as_user

READY_TIMEOUT_S = 60.0
"""How long the standby may take to accept connections (a ceiling, never a measurement)."""


@dataclass(frozen=True)
class StandbyPair:
    """The primary's and the standby's URLs (the ``postgres`` database of each)."""

    primary: str
    standby: str


def _own(path: Path, user: str | None) -> None:
    """Make ``path`` a directory the server user may write (it runs as that user)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _wait_for_standby(url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                if row and row[0]:
                    return
                raise AssertionError("the copy started as a primary, not as a standby")
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def standby_pair() -> Iterator[StandbyPair]:
    """Start a primary and a hot standby of it in a new temporary directory; stop both and
    remove it afterwards.

    Not under pytest's temporary root: as root the servers run as the ``postgres`` user,
    who needs search permission on every directory above their sockets, and every pytest
    session that starts meanwhile (another run on the machine) resets that root to 0700.
    """
    bin_dir = find_bin_dir()
    if bin_dir is None or not (bin_dir / "pg_basebackup").is_file():
        pytest.skip("no PostgreSQL server binaries with pg_basebackup (PATH or "
                    "/usr/lib/postgresql/*/bin): install postgresql to run the standby tests")
    with tempfile.TemporaryDirectory(prefix="sf-standby-") as made:
        with _started_pair(bin_dir, Path(made), run_as_user()) as pair:
            yield pair


@contextmanager
def migrated_standby_pair() -> Iterator[StandbyPair]:
    """:func:`standby_pair` with the event store migrated on the primary and replayed."""
    from events import EventStore  # the helper's other users need no store

    with standby_pair() as started:
        with EventStore.connect(started.primary) as primary:
            primary.migrate()
        wait_for_replay(started.primary, started.standby)
        yield started


@contextmanager
def _started_pair(bin_dir: Path, root: Path, user: str | None) -> Iterator[StandbyPair]:
    primary = Control(bin_dir, root / "primary", user)
    standby = Control(bin_dir, root / "replicas" / "standby", user)
    primary_url = primary.ensure_running()
    try:
        _own(root / "replicas", user)
        copied = standby.run("pg_basebackup", "-D", str(standby.data_dir), "-R",
                             "-X", "stream", "-c", "fast", "-h", str(primary.data_dir),
                             "-U", "postgres")
        if copied.returncode != 0:
            raise AssertionError(f"pg_basebackup: {(copied.stderr or copied.stdout).strip()}")
        # The primary keeps its socket's lock file and its log in its data directory, and
        # the copy took them along: the standby would take the lock for a running server.
        copied_along = [*standby.data_dir.glob(".s.PGSQL.*.lock"), standby.data_dir / "server.log"]
        for leftover in copied_along:
            leftover.unlink(missing_ok=True)
        standby_url = standby.ensure_running()
        try:
            _wait_for_standby(standby_url)
            yield StandbyPair(primary_url, standby_url)
        finally:
            standby.stop()
    finally:
        primary.stop()


def wait_for_replay(primary: str, standby: str) -> None:
    """Wait until the standby has replayed everything the primary has written so far."""
    with psycopg.connect(primary, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    target = row[0]
    deadline = time.monotonic() + READY_TIMEOUT_S
    with psycopg.connect(standby, autocommit=True) as conn:
        while True:
            done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                (target,)).fetchone()
            if done and done[0]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby never replayed up to {target}")
            time.sleep(0.02)
