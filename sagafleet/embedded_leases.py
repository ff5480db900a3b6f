"""Leases on the embedded servers under one ``SAGAFLEET_HOME``: the last leaver stops them.

Who takes a lease: the long-running commands that bring a fleet up for as long as they run,
``sagafleet demo`` and ``sagafleet dev``. Two of them on one home share the servers; when
one ends, the servers stay as long as the other runs, and the last to leave stops them, but
only if a lease holder started them: servers that ran before any lease (``sagafleet embedded
start``, a worker, a console) belong to whoever started them and are left running.

Who takes none, and why the servers then stay: a one-shot command that needs the database or
the broker (``start``, ``approve``, ``db migrate``, ``principals add``, ``tools export``)
starts the embedded servers if they are not running and leaves them running. The next
command reuses them (a start costs seconds), and the read commands (``status``, ``list``,
``queue``) never start a server: stopping after ``start`` would make the ``status`` that
follows it fail. ``sagafleet embedded stop`` stops them.

A lease is a file named after the holder's pid under ``SAGAFLEET_HOME/leases``; a lease
whose process is gone (killed, crashed) is stale and pruned by the next taker or leaver.
Taking and leaving happen under an exclusive ``flock`` of ``leases/.lock``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sagafleet import embedded, embedded_state

OWNED = ".started-by-a-lease"
"""The marker saying a lease holder started the servers (so the last leaver stops them)."""


@dataclass(frozen=True)
class Left:
    """What leaving did: whether others still hold leases, and which servers it stopped."""

    others: int
    stopped_postgres: bool = False
    stopped_redis: bool = False


def lease_dir(home: Path) -> Path:
    """Where the leases on ``home``'s servers live."""
    return home.resolve() / "leases"


@contextmanager
def _locked(home: Path) -> Iterator[Path]:
    directory = lease_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield directory
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def holders(home: Path) -> list[int]:
    """The pids holding a lease on ``home`` now (stale leases are not counted)."""
    directory = lease_dir(home)
    if not directory.is_dir():
        return []
    return sorted(pid for pid in _lease_pids(directory) if _alive(pid))


def take(home: Path, pid: int | None = None) -> None:
    """Take a lease for ``pid`` (default: this process) before using the servers. The first
    lease notes which servers are not running yet: the caller is about to start them, so
    they are a lease holder's, and the last leaver stops them."""
    pid = os.getpid() if pid is None else pid
    with _locked(home) as directory:
        _prune(directory)
        if not _lease_pids(directory):
            running = embedded_state.state(home)
            started = [name for name, up in (("postgres", running.postgres),
                                             ("redis", running.redis)) if not up]
            (directory / OWNED).write_text("".join(f"{name}\n" for name in started))
        (directory / str(pid)).touch()


def leave(home: Path, *, postgres: bool = True, redis: bool = True, keep: bool = False,
          pid: int | None = None) -> Left:
    """Give up ``pid``'s lease (default: this process). The last leaver stops the servers
    the first lease holder found stopped, among those named (``postgres``/``redis`` false:
    that one is given by URL, not embedded); with ``keep`` it stops none and hands them
    over to the user (no later leaver stops them either)."""
    pid = os.getpid() if pid is None else pid
    with _locked(home) as directory:
        (directory / str(pid)).unlink(missing_ok=True)
        _prune(directory)
        others = len(_lease_pids(directory))
        marker = directory / OWNED
        if keep:
            marker.unlink(missing_ok=True)
        if others or not marker.exists():
            return Left(others)
        started = set(marker.read_text().split())
        marker.unlink()
        return Left(0,
                    stopped_postgres=postgres and "postgres" in started
                    and embedded.stop_postgres(home),
                    stopped_redis=redis and "redis" in started and embedded.stop_redis(home))


@contextmanager
def lease(home: Path, *, postgres: bool = True, redis: bool = True,
          keep: bool = False) -> Iterator[None]:
    """Hold a lease while the body runs; on leaving, stop the servers if this was the last
    lease and a lease holder started them (``keep``: leave them running, for the user).
    With neither server embedded (both given by URL) there is nothing to lease."""
    if not (postgres or redis):
        yield
        return
    take(home)
    try:
        yield
    finally:
        leave(home, postgres=postgres, redis=redis, keep=keep)


def _lease_pids(directory: Path) -> list[int]:
    return [int(path.name) for path in directory.iterdir() if path.name.isdigit()]


def _prune(directory: Path) -> None:
    for pid in _lease_pids(directory):
        if not _alive(pid):
            (directory / str(pid)).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
