"""What runs under ``SAGAFLEET_HOME``, found without starting anything.

Read commands use the embedded PostgreSQL only if it already runs (they never start a
server), and the demo stops only the servers it started itself: both ask here first. The
checks read the servers' own files — PostgreSQL's ``postmaster.pid`` (pid, port, socket
directory), the Redis pid file and socket — whichever package provided the binaries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EmbeddedState:
    """Which embedded servers under one home run right now."""

    postgres: bool
    redis: bool


def state(home: Path) -> EmbeddedState:
    """Which of the two embedded servers under ``home`` run."""
    return EmbeddedState(postgres=postgres_running(home), redis=redis_running(home))


def postgres_data_dir(home: Path) -> Path:
    """Where the embedded cluster keeps its data (``embedded.start_postgres`` makes it)."""
    return home.resolve() / "pg"


def postgres_exists(home: Path) -> bool:
    """Whether an embedded cluster was ever created under ``home``."""
    return (postgres_data_dir(home) / "PG_VERSION").exists()


def postgres_running(home: Path) -> bool:
    """Whether the embedded cluster's postmaster runs: its pid is alive and its socket
    exists (a stale ``postmaster.pid`` left by a crash counts as not running)."""
    try:
        lines = (postgres_data_dir(home) / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), lines[3].strip(), lines[4].strip()
    except (OSError, ValueError, IndexError):
        return False
    if not _alive(pid):
        return False
    # With no socket directory the server listens on TCP only; the live pid has to do.
    return not socket_dir or (Path(socket_dir) / f".s.PGSQL.{port}").exists()


def redis_socket(home: Path) -> Path:
    """The embedded Redis's unix socket (``embedded.start_redis`` listens there)."""
    return home.resolve() / "redis" / "redis.sock"


def redis_url(home: Path) -> str:
    """The embedded Redis's broker URL, whether it runs or not."""
    return f"redis+socket://{redis_socket(home)}"


def redis_running(home: Path) -> bool:
    """Whether the embedded Redis answers on its socket."""
    return redis_answers(redis_socket(home))


def redis_answers(socket: Path) -> bool:
    """Whether a Redis answers a PING on the unix socket ``socket`` (absent: no)."""
    if not socket.exists():
        return False
    import redis

    try:
        client = redis.Redis(unix_socket_path=str(socket), socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process (pgserver runs the cluster as its own user)
    return True
