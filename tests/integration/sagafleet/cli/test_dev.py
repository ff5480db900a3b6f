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

CUSTOM_TOOLS = Path(__file__).resolve().parents[4] / "examples" / "custom_tools"
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


class DevRun:
    """A ``sagafleet dev`` subprocess, read up to its ready line."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.port = _free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sagafleet", "dev", "--port", str(self.port), *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.children: list[int] = []
        printed: list[str] = []
        assert self.process.stdout is not None
        for line in self.process.stdout:
            printed.append(line)
            self.children += [int(pid) for pid in re.findall(r"pid (\d+),", line)]
            if line.startswith("Ctrl-C stops everything"):
                break
        self.shown = "".join(printed)

    def interrupt(self) -> str:
        """Ctrl-C, and the rest of what it printed."""
        self.process.send_signal(signal.SIGINT)
        return self.process.communicate(timeout=STARTUP_S)[0]

    def kill_leftovers(self) -> None:
        """Whatever a failed test left running."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _stops_everything(dev: DevRun, home: Path) -> None:
    # when Ctrl-C reaches it
    rest = dev.interrupt()
    # then it exits 130 having stopped every process and server it started
    assert dev.process.returncode == ExitCode.INTERRUPTED, rest
    assert "sagafleet dev: stopped" in rest
    assert [pid for pid in dev.children if _alive(pid)] == []
    assert embedded_state.state(home) == embedded_state.EmbeddedState(False, False)


def test_dev_runs_a_local_fleet_that_settles_a_saga_and_ctrl_c_stops_all_of_it(
    home: Path,
) -> None:
    # given `sagafleet dev` on a bare home: no URL configured, nothing running
    env = _env(home)
    dev = DevRun(env)
    try:
        # when it says it is ready, it names the four processes and where the console is
        assert "Ctrl-C stops everything" in dev.shown, dev.shown
        assert len(dev.children) == 4 and all(_alive(pid) for pid in dev.children)
        assert f"http://127.0.0.1:{dev.port}/" in dev.shown
        token = (home / "dev-operator.token").read_text().strip()
        assert token in dev.shown

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
            with urllib.request.urlopen(f"http://127.0.0.1:{dev.port}/", timeout=30) as page:
                status = page.status
        except urllib.error.HTTPError as refused:
            status = refused.code
        assert status in (200, 303, 401)

        _stops_everything(dev, home)
    finally:
        dev.kill_leftovers()


def test_dev_runs_your_own_tools_and_definitions_for_any_tenant(home: Path) -> None:
    # given the onboarding example's tools and definition, as the README's five commands
    env = {**_env(home), "PYTHONPATH": str(CUSTOM_TOOLS)}
    dev = DevRun(env, "--tools", "onboarding_tools:tool_set", "--definitions",
                 str(CUSTOM_TOOLS / "onboarding.yaml"))
    try:
        assert "Ctrl-C stops everything" in dev.shown, dev.shown
        assert "definition:  onboarding v1" in dev.shown
        # the example's providers keep their records in tables of their own
        url = _sagafleet(env, "db", "url", "--show-password").stdout.strip()
        subprocess.run([sys.executable, str(CUSTOM_TOOLS / "onboarding_tools.py"), "install"],
                       env={**env, "SAGAFLEET_DATABASE_URL": url}, check=True, timeout=120)
        # when an agent of another tenant than dev's own starts the saga
        token = home / "bot.token"
        added = _sagafleet(env, "principals", "add", "bot", "--kind", "agent", "--role", "agent",
                           "--tenant", "acme", "--save-token", str(token))
        assert added.returncode == 0, added.stderr
        bot = {**env, "SAGAFLEET_TOKEN_FILE": str(token)}
        started = _sagafleet(bot, "start", "onboarding", "--input",
                             f"@{CUSTOM_TOOLS / 'onboarding-input.json'}", "--key", "first",
                             "--json")
        assert started.returncode == 0, started.stdout + started.stderr
        saga_id = json.loads(started.stdout)["saga_id"]
        # then the worker runs the user's tools to the end
        waited = _sagafleet(bot, "wait", saga_id, "--timeout", "120", "--json")
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert json.loads(waited.stdout)["saga"]["status"] == "COMPLETED"
        _stops_everything(dev, home)
    finally:
        dev.kill_leftovers()


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
