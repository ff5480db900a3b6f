"""Fixtures of the gateway tests: a migrated database, a flushed Redis, a real worker process,
and the ``sagafleet mcp`` server spawned as a separate process (stdio or HTTP)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagafleet import sandbox
from sagafleet.processes import spawn_sagafleet, stop_processes


@pytest.fixture
def server_env(database: str, broker: str, tmp_path: Path) -> dict[str, str]:
    """Environment of a spawned sagafleet process on the test's database and broker."""
    env = dict(os.environ)
    env.update({
        "SAGAFLEET_DATABASE_URL": database,
        "SAGAFLEET_BROKER_URL": broker,
        "SAGAFLEET_HOME": str(tmp_path / "home"),
        "SAGAFLEET_LEASE_SECONDS": "3",
        "SAGAFLEET_QUEUE_WAIT_SECONDS": "1",
        "SAGAFLEET_TOOLS": sandbox.TOOL_SET,
    })
    env.pop("SAGAFLEET_TENANT", None)
    env.pop("SAGAFLEET_TOKEN", None)  # each test says which token a server runs with
    return env


class Processes:
    """Real sagafleet processes (workers, HTTP servers), stopped at the end of the test."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env, self.log_dir = env, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        proc = spawn_sagafleet(args, self.env, self.log_dir / f"{args[0]}-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        stop_processes(self.procs)


@pytest.fixture
def processes(server_env: dict[str, str], tmp_path: Path) -> Iterator[Processes]:
    """Start ``sagafleet`` processes with ``processes.start(*args)``; all stopped afterwards."""
    running = Processes(server_env, tmp_path)
    yield running
    running.stop()
