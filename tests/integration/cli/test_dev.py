"""``sagafleet dev``: one command brings up a working local fleet on the embedded default,
and Ctrl-C takes all of it down again; what it is asked to run is checked first."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagafleet import cli, embedded, embedded_state
from sagafleet.demo import trip_input
from sagafleet.exit_codes import ExitCode

STARTUP_S = 300.0
"""Bound on a start-up on a loaded machine (a safety net that ends a hung test, not a
threshold the test measures)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLEET_")}
    return {**env, "SAGAFLEET_HOME": str(home)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _sagafleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env,
                          capture_output=True, text=True, timeout=STARTUP_S, check=False)


@pytest.fixture
def home() -> Iterator[Path]:
    """A short home of its own (unix socket paths are short); its servers stopped after."""
    path = Path(tempfile.mkdtemp(prefix="sfdev-", dir="/tmp"))
    yield path
    embedded.stop_embedded(path)
    shutil.rmtree(path, ignore_errors=True)


def test_dev_runs_a_local_fleet_that_settles_a_saga_and_ctrl_c_stops_all_of_it(
    home: Path,
) -> None:
    # given `sagafleet dev` on a bare home: no URL configured, nothing running
    port = _free_port()
    env = _env(home)
    dev = subprocess.Popen([sys.executable, "-m", "sagafleet", "dev", "--port", str(port)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert dev.stdout is not None
    printed: list[str] = []
    children: list[int] = []
    try:
        # when it says it is ready
        for line in dev.stdout:
            printed.append(line)
            children += [int(pid) for pid in re.findall(r"pid (\d+),", line)]
            if line.startswith("Ctrl-C stops everything"):
                break
        shown = "".join(printed)
        assert "Ctrl-C stops everything" in shown, shown
        # then it names the four processes and where the console is
        assert len(children) == 4 and all(_alive(pid) for pid in children)
        assert f"http://127.0.0.1:{port}/" in shown
        token = (home / "dev-operator.token").read_text().strip()
        assert token in shown

        # and a saga started through the client (the command line) runs on its worker
        agent = {**env, "SAGAFLEET_TOKEN_FILE": str(home / "dev-agent.token")}
        started = _sagafleet(agent, "start", "trip", "--input", json.dumps(trip_input(0, 7)),
                             "--key", "dev-1", "--json")
        assert started.returncode == 0, started.stdout + started.stderr
        saga_id = json.loads(started.stdout)["saga_id"]
        waited = _sagafleet(agent, "wait", saga_id, "--timeout", "120", "--json")
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert json.loads(waited.stdout)["saga"]["status"] == "COMPLETED"

        # and the projector puts it in the read models `list` shows
        deadline = time.monotonic() + STARTUP_S
        listed: dict[str, str] = {}
        while listed.get(saga_id) != "COMPLETED" and time.monotonic() < deadline:
            shown_list = _sagafleet(agent, "list", "--json")
            assert shown_list.returncode == 0, shown_list.stderr
            listed = {s["saga_id"]: s["state"] for s in json.loads(shown_list.stdout)["sagas"]}
            time.sleep(0.5)
        assert listed.get(saga_id) == "COMPLETED"

        # and the console answers over HTTP (sign-in required)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
                status = page.status
        except urllib.error.HTTPError as refused:
            status = refused.code
        assert status in (200, 303, 401)

        # when Ctrl-C reaches it
        dev.send_signal(signal.SIGINT)
        rest = dev.communicate(timeout=STARTUP_S)[0]
        # then it exits 130 having stopped every process and server it started
        assert dev.returncode == ExitCode.INTERRUPTED, rest
        assert "sagafleet dev: stopped" in rest
        assert [pid for pid in children if _alive(pid)] == []
        assert embedded_state.state(home) == embedded_state.EmbeddedState(False, False)
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_malformed_tool_set_is_refused_by_name_before_anything_starts(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SAGAFLEET_HOME", str(home))
    for spec in ("no-colon-here", "no_such_module_xyz:tools", "json:no_such_attribute"):
        assert cli.main(["dev", "--tools", spec, "--port", str(_free_port())]) == ExitCode.USAGE
        err = capsys.readouterr().err
        assert f"sagafleet dev --tools {spec}:" in err and "Traceback" not in err
    assert list(home.iterdir()) == []  # no server was started


def test_a_bad_definition_file_is_refused_by_name_before_anything_starts(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("SAGAFLEET_HOME", str(home))
    garbled = tmp_path / "garbled.yaml"
    garbled.write_text("name: [unclosed\n")
    not_a_mapping = tmp_path / "list.json"
    not_a_mapping.write_text("[1, 2]")
    for path in (tmp_path / "absent.yaml", garbled, not_a_mapping):
        code = cli.main(["dev", "--definitions", str(path), "--port", str(_free_port())])
        assert code == ExitCode.USAGE
        err = capsys.readouterr().err
        assert "sagafleet dev --definitions" in err and str(path) in err, err
    assert list(home.iterdir()) == []


def test_a_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["dev", "--port", "70000"]) == ExitCode.USAGE
    assert "--port must be 1..65535" in capsys.readouterr().err
