"""Leases on the embedded servers (``sagafleet.embedded_leases``): long-running users of one
home (``sagafleet demo``, ``sagafleet dev``) share its servers, the last leaver stops them, and
servers that ran before any lease (someone else's) are never stopped by a leaver."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagafleet import embedded, embedded_leases, embedded_state
from sagafleet.embedded_leases import Left

BOTH_UP = embedded_state.EmbeddedState(postgres=True, redis=True)
BOTH_DOWN = embedded_state.EmbeddedState(postgres=False, redis=False)


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """One short home for the module (its cluster is created once); stopped and removed."""
    path = Path(tempfile.mkdtemp(prefix="sflease-", dir="/tmp"))
    yield path
    embedded.stop_embedded(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def stopped(home: Path) -> Iterator[Path]:
    """The home with both servers stopped and no lease, before and after the test."""
    embedded.stop_embedded(home)
    shutil.rmtree(embedded_leases.lease_dir(home), ignore_errors=True)
    yield home
    embedded.stop_embedded(home)
    shutil.rmtree(embedded_leases.lease_dir(home), ignore_errors=True)


@pytest.fixture
def other_holder() -> Iterator[int]:
    """A live process standing for a second command holding a lease."""
    process = subprocess.Popen(["sleep", "600"])
    yield process.pid
    process.kill()
    process.wait()


def _start(home: Path) -> None:
    """Start both servers as a command would, in a process of its own (the package that
    runs PostgreSQL remembers a server per process, even one stopped since)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLEET_")}
    subprocess.run([sys.executable, "-m", "sagafleet", "embedded", "start"],
                   env={**env, "SAGAFLEET_HOME": str(home)}, check=True,
                   capture_output=True, timeout=300)


def test_the_last_leaver_stops_the_servers_a_lease_holder_started(
    stopped: Path, other_holder: int
) -> None:
    # given a first command that takes a lease and starts the servers, and a second one
    embedded_leases.take(stopped)
    _start(stopped)
    embedded_leases.take(stopped, pid=other_holder)
    # when the first leaves, the second still uses them: they keep running
    assert embedded_leases.leave(stopped) == Left(others=1)
    assert embedded_state.state(stopped) == BOTH_UP
    # when the last leaves, it stops them
    assert embedded_leases.leave(stopped, pid=other_holder) == Left(
        others=0, stopped_postgres=True, stopped_redis=True)
    assert embedded_state.state(stopped) == BOTH_DOWN


def test_servers_that_ran_before_any_lease_are_left_running(stopped: Path) -> None:
    # given servers someone started (sagafleet embedded start, say)
    _start(stopped)
    # when a command takes a lease and leaves
    with embedded_leases.lease(stopped):
        pass
    # then they still run: they were not a lease holder's
    assert embedded_state.state(stopped) == BOTH_UP


def test_a_stale_lease_of_a_dead_process_keeps_nothing_running(stopped: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    embedded_leases.take(stopped)
    _start(stopped)
    embedded_leases.take(stopped, pid=dead.pid)  # e.g. a demo killed with SIGKILL
    assert embedded_leases.holders(stopped) == [os.getpid()]
    assert embedded_leases.leave(stopped).others == 0
    assert embedded_state.state(stopped) == BOTH_DOWN


def test_keeping_the_servers_hands_them_over_to_the_user(
    stopped: Path, other_holder: int
) -> None:
    # given a demo run with --keep-servers that started them
    with embedded_leases.lease(stopped, keep=True):
        _start(stopped)
    assert embedded_state.state(stopped) == BOTH_UP
    # when another command takes and leaves a lease afterwards, it does not stop them
    embedded_leases.take(stopped, pid=other_holder)
    assert embedded_leases.leave(stopped, pid=other_holder) == Left(others=0)
    assert embedded_state.state(stopped) == BOTH_UP


def test_only_the_embedded_servers_are_stopped(stopped: Path) -> None:
    # given a command whose broker is embedded but whose database has a URL
    with embedded_leases.lease(stopped, postgres=False, redis=True):
        _start(stopped)
    # then the last leaver stopped the broker only
    assert embedded_state.state(stopped) == embedded_state.EmbeddedState(
        postgres=True, redis=False)
