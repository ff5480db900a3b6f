"""Replicated servers on loopback, from the machine's own binaries: a PostgreSQL primary and
a streaming standby (``pg_basebackup -R``), a lone PostgreSQL for the providers' ledgers,
and a Redis master with a replica watched by three Sentinels.

Everything listens on 127.0.0.1 only, on ports the kernel hands out, and keeps its data in
one directory the caller owns. :class:`Servers` is a context manager: whatever was started
is stopped on the way out, however the run ends (a PostgreSQL cluster by ``pg_ctl stop -m
immediate``, a Redis process by SIGKILL), so no process outlives the run.

Failures are machine failures, not shutdowns: :meth:`PostgresPair.kill_primary` freezes every
process of the primary (SIGSTOP, all at once) and then SIGKILLs them, so nothing more
commits or replicates after the freeze; :meth:`RedisGroup.kill_master` SIGKILLs the master.
Promotion is what an operator (or Patroni, or Sentinel) does next.

As root the PostgreSQL servers run as the ``postgres`` system user (PostgreSQL refuses
root), with the binaries and user rules of :mod:`sagafleet.system_postgres`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psycopg
import redis

from sagafleet import embedded
from sagafleet.system_postgres import Control, find_bin_dir, run_as_user

Replication = Literal["sync", "async"]
SENTINEL_MASTER = "sagafleet"
"""The name the Sentinels monitor the broker's master under."""
STANDBY_NAME = "standby1"
"""The standby's ``application_name``: what ``synchronous_standby_names`` lists."""
READY_S = 60.0
"""The longest a server may take to answer after it was started (a ceiling, not a wait)."""


class ServerError(RuntimeError):
    """A server could not be started, replicated, killed or promoted; the message says how."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait(what: str, ready: object, timeout_s: float = READY_S) -> None:
    """Call ``ready`` until it returns true, at most ``timeout_s`` (ServerError after)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if ready():  # type: ignore[operator]
                return
        except (psycopg.Error, redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise ServerError(f"{what} not ready after {timeout_s:.0f}s" + (f": {last}" if last else ""))


# -- PostgreSQL ------------------------------------------------------------------------------


@dataclass
class PostgresNode:
    """One PostgreSQL cluster listening on 127.0.0.1:``port``."""

    control: Control
    port: int
    started: bool = False

    @property
    def data_dir(self) -> Path:
        """Where the cluster keeps its data (and its socket and log)."""
        return self.control.data_dir

    def url(self, dbname: str = "postgres") -> str:
        """A DSN of this one server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}?connect_timeout=3"

    def initdb(self) -> None:
        """Make a new cluster (trust authentication: loopback only)."""
        self._own(self.data_dir)
        done = self.control.run("initdb", "-D", str(self.data_dir), "-U", "postgres",
                                "--auth=trust", "--encoding=UTF8")
        if done.returncode != 0:
            raise ServerError(f"initdb: {(done.stderr or done.stdout).strip()}")

    def start(self, *settings: str) -> None:
        """Start the cluster on its port, with ``name=value`` server settings."""
        options = [f"-h 127.0.0.1 -p {self.port} -k {shlex.quote(str(self.data_dir))}"]
        options += [f"-c {shlex.quote(s)}" for s in settings]
        self.started = True
        done = self.control.run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60", "-l",
                                str(self.data_dir / "server.log"), "-o", " ".join(options),
                                "start")
        if done.returncode != 0:
            raise ServerError(f"pg_ctl start: {(done.stderr or done.stdout).strip()}; "
                              f"see {self.data_dir / 'server.log'}")

    def stop(self) -> None:
        """Stop the cluster at once if it runs (``-m immediate``: nothing to keep)."""
        if self.started and (self.data_dir / "postmaster.pid").exists():
            self.control.run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w",
                             "stop", timeout=60)
        self.started = False

    def processes(self) -> list[int]:
        """The postmaster and every process it started (backends, WAL sender, ...)."""
        try:
            postmaster = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        return [postmaster, *_children(postmaster)]

    def kill(self) -> int:
        """Freeze every process of this server at once, then SIGKILL them: a machine lost
        mid-stride (nothing commits, replicates or cleans up after the freeze). Returns
        how many processes it killed."""
        pids = self.processes()
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        _wait("the killed server's processes to go",
              lambda: not any(_alive(pid) for pid in pids), timeout_s=30)
        self.started = False
        return len(pids)

    def _own(self, path: Path) -> None:
        """Make ``path`` a directory the server user owns, every directory above it
        searchable by that user (it runs as that user when we are root)."""
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        user = self.control.user
        if user is None:
            return
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        for directory in path.parents:
            mode = directory.stat().st_mode
            if not mode & 0o001:
                directory.chmod(mode | 0o001)


def _children(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses; split after it.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def _title(pid: int) -> str:
    """A process's title (its command line, as PostgreSQL rewrites it)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2:].split()[0] not in ("Z", "X")


@dataclass
class PostgresPair:
    """A primary and a standby streaming from it; which one is the primary changes on
    :meth:`promote_standby`."""

    primary: PostgresNode
    standby: PostgresNode
    replication: Replication

    def url(self, dbname: str) -> str:
        """The multi-host DSN a fleet uses: both servers, the writable one chosen."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return (f"postgresql://postgres@{hosts}/{dbname}"
                "?target_session_attrs=read-write&connect_timeout=3")

    def start(self) -> None:
        """Start the primary, copy it with ``pg_basebackup -R``, start the standby, and with
        synchronous replication wait until the primary names it its synchronous standby."""
        self.primary.initdb()
        self.primary.start("wal_level=replica", "max_wal_senders=5",
                           "wal_keep_size=256MB", "max_connections=200")
        self.primary._own(self.standby.data_dir)
        source = (f"host=127.0.0.1 port={self.primary.port} user=postgres "
                  f"application_name={STANDBY_NAME}")
        copied = self.standby.control.run(
            "pg_basebackup", "-D", str(self.standby.data_dir), "-R", "-X", "stream",
            "-c", "fast", "-d", source)
        if copied.returncode != 0:
            raise ServerError(f"pg_basebackup: {(copied.stderr or copied.stdout).strip()}")
        for leftover in [*self.standby.data_dir.glob(".s.PGSQL.*"),
                         self.standby.data_dir / "server.log"]:
            leftover.unlink(missing_ok=True)
        self.standby.start("hot_standby=on", "max_connections=200")
        _wait("the standby to stream", self._streaming)
        if self.replication == "sync":
            with psycopg.connect(self.primary.url(), autocommit=True) as conn:
                # Only the primary waits for the standby: the copy was taken before this,
                # so a promoted standby runs alone, never waiting for a standby it lacks.
                conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
                conn.execute("ALTER SYSTEM SET synchronous_commit = 'on'")
                conn.execute("SELECT pg_reload_conf()")
            _wait("the standby to become synchronous", self._synchronous)

    def _streaming(self) -> bool:
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_replication"
                               " WHERE state = 'streaming'").fetchone()
        return bool(row and row[0])

    def _synchronous(self) -> bool:
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_replication"
                               " WHERE sync_state = 'sync'").fetchone()
        return bool(row and row[0])

    def pause_replication(self) -> list[int]:
        """Stop the primary's WAL senders (SIGSTOP): the standby falls behind, as over a
        congested link, until the primary dies. With
        synchronous replication the primary's commits wait meanwhile; with asynchronous
        replication they go on, acknowledged. (Stopping the standby's receiver instead
        would lose nothing: what the sender wrote waits in the socket's buffers.)"""
        senders = [pid for pid in self.primary.processes()[1:]
                   if _title(pid).startswith("postgres: walsender")]
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        return senders

    def kill_primary(self) -> int:
        """SIGKILL every process of the primary (see :meth:`PostgresNode.kill`)."""
        return self.primary.kill()

    def promote_standby(self) -> float:
        """Promote the standby (``pg_ctl promote``) and wait until it accepts writes; the
        seconds that took. The standby is the primary from then on."""
        began = time.monotonic()
        done = self.standby.control.run("pg_ctl", "-D", str(self.standby.data_dir), "-w",
                                        "promote")
        if done.returncode != 0:
            raise ServerError(f"pg_ctl promote: {(done.stderr or done.stdout).strip()}")
        _wait("the promoted standby to accept writes", self._writable)
        self.primary, self.standby = self.standby, self.primary
        return time.monotonic() - began

    def _writable(self) -> bool:
        with psycopg.connect(self.standby.url(), autocommit=True) as conn:
            row = conn.execute("SELECT NOT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def stop(self) -> None:
        """Stop whichever of the two still runs."""
        for node in (self.standby, self.primary):
            node.stop()


# -- Redis and Sentinel ------------------------------------------------------------------------


@dataclass
class RedisProcess:
    """One ``redis-server`` process (a data server or a Sentinel) on 127.0.0.1:``port``."""

    port: int
    proc: subprocess.Popen[bytes]

    def client(self) -> redis.Redis:
        """A client of this one server."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5,
                           socket_connect_timeout=2)

    def kill(self) -> None:
        """SIGKILL the process (nothing is saved: the broker runs without persistence)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@dataclass
class RedisGroup:
    """A Redis master, one replica and three Sentinels (quorum 2) watching them."""

    root: Path
    master: RedisProcess | None = None
    replica: RedisProcess | None = None
    sentinels: list[RedisProcess] = field(default_factory=list)
    down_after_ms: int = 1000

    @property
    def url(self) -> str:
        """The broker URL: every Sentinel, kombu's ``sentinel://…;sentinel://…`` form."""
        return ";".join(f"sentinel://127.0.0.1:{s.port}/0" for s in self.sentinels)

    def start(self) -> None:
        """Start master, replica and Sentinels; wait until the Sentinels know the replica
        and each other, so a failover can be agreed on."""
        binary = embedded.find_redis_on_path()
        if binary is None:
            raise ServerError("no redis-server on PATH (apt install redis-server)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.master = self._server(binary, "master")
        self.replica = self._server(binary, "replica", "--replicaof", "127.0.0.1",
                                    str(self.master.port))
        _wait("the replica to sync", lambda: self._replica_synced(self.replica))
        for n in range(3):
            self.sentinels.append(self._sentinel(binary, n))
        _wait("the Sentinels to know the replica and each other", self._sentinels_ready)

    def _server(self, binary: Path, name: str, *extra: str) -> RedisProcess:
        port = free_port()
        directory = self.root / name
        directory.mkdir(exist_ok=True)
        # As the embedded broker: no persistence (the harsh case), never evict a message.
        args = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir",
                str(directory), "--save", "", "--appendonly", "no",
                "--maxmemory-policy", "noeviction", "--logfile", str(directory / "redis.log"),
                *extra]
        process = RedisProcess(port, subprocess.Popen(  # noqa: S603 - the machine's redis-server
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        _wait(f"redis {name}", lambda: process.client().ping())
        return process

    def _sentinel(self, binary: Path, n: int) -> RedisProcess:
        assert self.master is not None
        port = free_port()
        directory = self.root / f"sentinel{n}"
        directory.mkdir(exist_ok=True)
        config = directory / "sentinel.conf"  # a Sentinel rewrites its own config file
        config.write_text("\n".join([
            f"port {port}", "bind 127.0.0.1", f"dir {directory}",
            f"logfile {directory / 'sentinel.log'}",
            f"sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {self.master.port} 2",
            f"sentinel down-after-milliseconds {SENTINEL_MASTER} {self.down_after_ms}",
            f"sentinel failover-timeout {SENTINEL_MASTER} 10000",
            f"sentinel parallel-syncs {SENTINEL_MASTER} 1", ""]))
        process = RedisProcess(port, subprocess.Popen(  # noqa: S603 - the machine's redis-server
            [str(binary), str(config), "--sentinel"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))
        _wait(f"sentinel {n}", lambda: process.client().ping())
        return process

    @staticmethod
    def _replica_synced(replica: RedisProcess | None) -> bool:
        assert replica is not None
        info = replica.client().info("replication")
        return info.get("master_link_status") == "up"

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            master = sentinel.client().sentinel_master(SENTINEL_MASTER)
            if (int(master.get("num-slaves", 0)) < 1
                    or int(master.get("num-other-sentinels", 0)) < 2):
                return False
        return True

    def master_port(self) -> int | None:
        """The port of the master as the first Sentinel that answers names it."""
        for sentinel in self.sentinels:
            try:
                address = sentinel.client().sentinel_get_master_addr_by_name(SENTINEL_MASTER)
            except (redis.RedisError, OSError):
                continue
            if address:
                return int(address[1])
        return None

    def kill_master(self) -> float:
        """SIGKILL the master and wait until the Sentinels have promoted the replica and it
        accepts writes; the seconds that took. The replica is the master from then on."""
        assert self.master is not None and self.replica is not None
        began = time.monotonic()
        self.master.kill()
        promoted = self.replica
        _wait("Sentinel to promote the replica",
              lambda: self.master_port() == promoted.port
              and promoted.client().info("replication").get("role") == "master")
        self.master, self.replica = promoted, None
        return time.monotonic() - began

    def stop(self) -> None:
        """SIGKILL every process of the group that still runs."""
        for process in [*self.sentinels, self.replica, self.master]:
            if process is not None:
                process.kill()


# -- all of them ---------------------------------------------------------------------------------


class Servers:
    """The run's servers: the replicated event store, the ledgers' server, the Redis group."""

    def __init__(self, root: Path, replication: Replication) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None or not (bin_dir / "pg_basebackup").is_file():
            raise ServerError("no PostgreSQL server binaries with pg_basebackup (PATH or "
                              "/usr/lib/postgresql/*/bin): apt install postgresql")
        user = run_as_user()
        self.root = root
        self.postgres = PostgresPair(
            PostgresNode(Control(bin_dir, root / "pg-a", user), free_port()),
            PostgresNode(Control(bin_dir, root / "pg-b", user), free_port()),
            replication)
        self.ledgers = PostgresNode(Control(bin_dir, root / "pg-ledgers", user), free_port())
        self.redis = RedisGroup(root / "redis")

    def __enter__(self) -> Servers:
        try:
            self.postgres.start()
            self.ledgers.initdb()
            self.ledgers.start("max_connections=200")
            self.redis.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every server that was started (each on its own: one failure stops no other)."""
        for stop in (self.redis.stop, self.postgres.stop, self.ledgers.stop):
            with contextlib.suppress(Exception):
                stop()


@contextlib.contextmanager
def started(root: Path, replication: Replication) -> Iterator[Servers]:
    """:class:`Servers` under ``root``, started, and stopped however the block ends."""
    with Servers(root, replication) as servers:
        yield servers
