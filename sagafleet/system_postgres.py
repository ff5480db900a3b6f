"""A PostgreSQL cluster run with binaries the machine already has, for the embedded default
where no embedded package has a wheel (Alpine, other architectures, a future CPython).

It does what the embedded package does, with the system's ``initdb`` and ``pg_ctl``: a
cluster in ``SAGAFLEET_HOME/pg`` with trust authentication for the ``postgres`` role that
listens on a unix socket in its own data directory only (no TCP port). PostgreSQL refuses
to run as root, so under root every command runs as the ``postgres`` system user.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

DEBIAN_ROOT = Path("/usr/lib/postgresql")
"""Where Debian and Ubuntu install each major version's binaries (``15/bin``, ``16/bin``)."""

SERVER_USER = "postgres"
"""The unprivileged system user the cluster runs as when sagafleet runs as root."""


class StartFailed(Exception):
    """``initdb`` or ``pg_ctl`` failed; the message carries their output."""


def find_bin_dir(search_path: str | None = None, versioned_root: Path = DEBIAN_ROOT) -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: from ``search_path``
    (default: PATH), else the newest major version under ``versioned_root``."""
    initdb = shutil.which("initdb", path=search_path)
    if initdb is not None:
        # /usr/local/bin/initdb may be a link into the versioned directory: pg_ctl finds the
        # postgres binary next to itself, so use the directory the link points into.
        candidate = Path(initdb).resolve().parent
        if _complete(candidate):
            return candidate
    versions = []
    if versioned_root.is_dir():
        for child in versioned_root.iterdir():
            if child.name.isdigit() and _complete(child / "bin"):
                versions.append((int(child.name), child / "bin"))
    return max(versions)[1] if versions else None


def _complete(bin_dir: Path) -> bool:
    return all((bin_dir / name).is_file() for name in ("initdb", "pg_ctl", "postgres"))


def run_as_user() -> str | None:
    """The user the cluster must run as: none (ourselves) unless we are root."""
    return SERVER_USER if os.geteuid() == 0 else None


@dataclass(frozen=True)
class Control:
    """Runs a cluster's binaries from ``bin_dir`` on ``data_dir`` (as ``user`` when set)."""

    bin_dir: Path
    data_dir: Path
    user: str | None = None

    def command(self, tool: str, *args: str) -> list[str]:
        """The argv running ``tool`` (``pg_ctl``, ``initdb``) with ``args`` as the right user."""
        argv = [str(self.bin_dir / tool), *args]
        if self.user is None:
            return argv
        return ["su", "-s", "/bin/sh", self.user, "-c", shlex.join(argv)]

    def run(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``tool`` and return what it did (the caller judges its exit code)."""
        # cwd "/": the server user may not be allowed into the caller's directory.
        return subprocess.run(self.command(tool, *args), capture_output=True, text=True,  # noqa: S603
                              check=False, timeout=timeout, cwd="/")

    @property
    def url(self) -> str:
        """The DSN of the cluster's ``postgres`` database over its unix socket."""
        return f"postgresql://postgres@/postgres?host={quote(str(self.data_dir), safe='/')}"

    def is_running(self) -> bool:
        """Whether a postmaster serves ``data_dir`` (``pg_ctl status`` exits 0)."""
        if not (self.data_dir / "PG_VERSION").exists():
            return False
        return self.run("pg_ctl", "-D", str(self.data_dir), "status").returncode == 0

    def ensure_running(self) -> str:
        """Create the cluster if it is new, start it unless it runs; return its URL."""
        if self.user is not None:
            self._grant_access(self.user)
        if not (self.data_dir / "PG_VERSION").exists():
            self.data_dir.mkdir(mode=0o700, exist_ok=True)
            if self.user is not None:
                entry = pwd.getpwnam(self.user)
                os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
            done = self.run("initdb", "-D", str(self.data_dir), "-U", "postgres",
                            "--auth=trust", "--encoding=UTF8")
            if done.returncode != 0:
                raise StartFailed(f"initdb: {(done.stderr or done.stdout).strip()}")
        if not self.is_running():
            # No TCP listener (-h ''): the socket in the data directory is the only way in.
            options = f"-h '' -k {shlex.quote(str(self.data_dir))}"
            done = self.run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60",
                            "-l", str(self.data_dir / "server.log"), "-o", options, "start")
            if done.returncode != 0:
                raise StartFailed(f"pg_ctl start: {(done.stderr or done.stdout).strip()}; "
                                  f"see {self.data_dir / 'server.log'}")
        return self.url

    def stop(self) -> bool:
        """Fast shutdown; whether a running cluster was stopped."""
        done = self.run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
        return done.returncode == 0

    def _grant_access(self, user: str) -> None:
        """Let the server user reach the data directory: search (x, not read) permission on
        every directory above it, as the embedded package does for its own."""
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise StartFailed(
                f"running as root, PostgreSQL needs the unprivileged user {user!r}: "
                f"create it (useradd --system {user}) or run as a normal user") from None
        for directory in reversed(self.data_dir.parent.parents):
            self._searchable(directory)
        self._searchable(self.data_dir.parent)

    @staticmethod
    def _searchable(directory: Path) -> None:
        mode = directory.stat().st_mode
        if not mode & 0o001:
            directory.chmod(mode | 0o001)
