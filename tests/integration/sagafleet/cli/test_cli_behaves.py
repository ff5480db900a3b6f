"""The real console command, run as a user runs it (a subprocess): read commands start no
server and say in one line why they cannot read; usage and setting errors exit 2; Ctrl-C
exits 130 after a clean stop; secrets stay masked; the demo stops only what it started."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from principal_support import issue_token

from sagafleet import embedded, embedded_state
from sagafleet.exit_codes import ExitCode
from sagafleet.migrate import migrate_all

NIL = "00000000-0000-0000-0000-000000000000"
# The read commands (tests/integration/sagafleet/cli/test_cli.py runs them on a configured
# database).
READ_COMMANDS = [
    ["status", NIL], ["list"], ["find", "some-key"], ["queue"], ["audit", NIL], ["stats"],
    ["alerts"], ["verify"], ["projections", "status"], ["dead-letters"],
    ["dead-letters", "show", "1"],
]


def sagafleet(*args: str, env: dict[str, str], stdin: str | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``sagafleet ARGS`` in a fresh interpreter, as a shell runs it."""
    return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env, input=stdin,  # noqa: S603
                          capture_output=True, text=True, timeout=timeout, check=False)


def bare_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment with no SAGAFLEET_* setting but ``SAGAFLEET_HOME`` and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLEET_")}
    return {**env, "SAGAFLEET_HOME": str(home), **extra}


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A SAGAFLEET_HOME short enough for unix sockets, its embedded servers stopped after."""
    home = Path(tempfile.mkdtemp(prefix="sfc-", dir="/tmp"))
    yield home
    embedded.stop_embedded(home)
    shutil.rmtree(home, ignore_errors=True)


def test_read_commands_with_no_database_anywhere_say_so_in_one_line_and_start_nothing(
    tmp_path: Path,
) -> None:
    # given no SAGAFLEET_DATABASE_URL and an empty SAGAFLEET_HOME
    home = tmp_path / "home"
    home.mkdir()
    for argv in READ_COMMANDS:
        # when a read command runs
        result = sagafleet(*argv, env=bare_env(home))
        # then it stops with exit 2 and one line naming what to do, and nothing was made
        assert result.returncode == ExitCode.USAGE, (argv, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, argv
        assert "NoDatabase" in result.stderr and "sagafleet db migrate" in result.stderr
    assert list(home.iterdir()) == []  # no cluster initialised, no Redis started
    as_json = sagafleet("stats", "--json", env=bare_env(home))
    assert json.loads(as_json.stdout)["error"] == "NoDatabase"


def test_a_stopped_embedded_database_is_named_and_embedded_start_brings_it_back(
    short_home: Path,
) -> None:
    # given the embedded database made and migrated, then stopped (as a demo leaves it)
    env = bare_env(short_home)
    assert sagafleet("db", "migrate", env=env).returncode == 0
    reader = issue_token(sagafleet_db_url(env), "reader", ["auditor"])
    env["SAGAFLEET_TOKEN"] = reader
    assert sagafleet("embedded", "stop", env=env).returncode == 0
    assert not embedded_state.postgres_running(short_home)
    # when a read command runs, then it says the server is not running (exit 6) and leaves it so
    stopped = sagafleet("list", env=env)
    assert stopped.returncode == ExitCode.UNAVAILABLE, stopped.stderr
    assert "DatabaseNotRunning" in stopped.stderr and "sagafleet embedded start" in stopped.stderr
    assert stopped.stderr.count("\n") == 1
    assert not embedded_state.postgres_running(short_home)
    status = json.loads(sagafleet("embedded", "status", "--json", env=env).stdout)
    assert status["running"] == {"postgres": False, "redis": False}
    # and once started again the read commands read it, still starting no broker
    started = json.loads(sagafleet("embedded", "start", "--json", env=env).stdout)
    assert started["servers"] == {"postgres": "started", "redis": "started"}
    embedded.stop_redis(short_home)
    listed = sagafleet("list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert not embedded_state.redis_running(short_home)


def sagafleet_db_url(env: dict[str, str]) -> str:
    """The database URL the command uses, password shown."""
    return sagafleet("db", "url", "--show-password", env=env).stdout.strip()


@pytest.mark.parametrize(("argv", "says"), [
    (["frobnicate"], "invalid choice"),
    (["list", "--status", "SOMEWHERE"], "invalid choice"),
    (["start", "trip"], "--input"),
    (["status"], "saga_id"),
    (["list", "--limit", "0"], "--limit"),
    (["demo", "--sagas", "0"], "--sagas"),
])
def test_usage_errors_exit_2_with_one_reason(argv: list[str], says: str, tmp_path: Path) -> None:
    result = sagafleet(*argv, env=bare_env(tmp_path))
    assert result.returncode == ExitCode.USAGE == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("variables", "named"), [
    ({"SAGAFLEET_LEASE_SECONDS": "soon"}, "SAGAFLEET_LEASE_SECONDS"),
    ({"SAGAFLEET_DATABASE_URL_FILE": "/nonexistent/db_url"}, "SAGAFLEET_DATABASE_URL_FILE"),
    ({"SAGAFLEET_TOKEN": "t", "SAGAFLEET_TOKEN_FILE": "/etc/hostname"}, "SAGAFLEET_TOKEN_FILE"),
])
def test_a_bad_setting_exits_2_naming_the_variable(
    variables: dict[str, str], named: str, tmp_path: Path,
) -> None:
    result = sagafleet("stats", env=bare_env(tmp_path, **variables))
    assert result.returncode == ExitCode.USAGE, result.stderr
    assert named in result.stderr and result.stderr.count("\n") == 1
    assert "ConfigurationError" in result.stderr and "pydantic" not in result.stderr


def test_db_url_masks_the_password_unless_asked_also_from_a_secret_file(tmp_path: Path) -> None:
    url = "postgresql://fleet:hunter2@db.internal:5432/fleet?sslmode=require"
    env = bare_env(tmp_path, SAGAFLEET_DATABASE_URL=url)
    masked = sagafleet("db", "url", env=env)
    assert masked.stdout.strip() == "postgresql://fleet:***@db.internal:5432/fleet?sslmode=require"
    assert json.loads(sagafleet("db", "url", "--json", env=env).stdout)["database_url"] == (
        masked.stdout.strip())
    assert sagafleet("db", "url", "--show-password", env=env).stdout.strip() == url
    # given the same URL as a Docker secret file instead of a variable
    secret = tmp_path / "db_url"
    secret.write_text(url + "\n")
    from_file = bare_env(tmp_path, SAGAFLEET_DATABASE_URL_FILE=str(secret))
    assert sagafleet("db", "url", env=from_file).stdout.strip() == masked.stdout.strip()
    assert "hunter2" not in sagafleet("--help", env=from_file).stdout


def test_help_lists_every_variable_including_secret_files(tmp_path: Path) -> None:
    from sagafleet.settings import Settings

    shown = sagafleet("--help", env=bare_env(tmp_path)).stdout
    for variable in Settings.variables():
        assert f"  {variable.name} [" in shown, variable.name
    assert "SAGAFLEET_DATABASE_URL_FILE" in shown and "130  interrupted" in shown


def test_input_from_stdin_that_is_not_json_is_named(tmp_path: Path) -> None:
    # refused before any database is looked for: the input is read first
    result = sagafleet("start", "trip", "--input", "-", "--json", env=bare_env(tmp_path),
                       stdin="{not json")
    assert result.returncode == ExitCode.INVALID_INPUT, result.stdout + result.stderr
    assert "stdin" in json.loads(result.stdout)["message"]
    assert not any(tmp_path.iterdir())


# -- Ctrl-C ------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _interruptible(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    # A child of a shell's background job inherits SIGINT ignored; a terminal's Ctrl-C is not.
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", *argv], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509


def _wait_for_metrics(proc: subprocess.Popen[str], port: int) -> None:
    """Until the process serves /metrics (it is then in its loop), or it died."""
    for _ in range(600):
        assert proc.poll() is None, proc.communicate()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1):  # noqa: S310
                return
        except urllib.error.HTTPError as answer:  # it serves: 401 without a fleet token
            assert answer.code == 401, answer
            return
        except OSError:
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
    raise AssertionError("the process never served its metrics")


def test_ctrl_c_stops_the_projector_cleanly_with_exit_130(fresh_database: str,
                                                          tmp_path: Path) -> None:
    # given a projector running against a real database
    port = _free_port()
    proc = _interruptible(["projector", "--metrics-port", str(port)],
                          bare_env(tmp_path, SAGAFLEET_DATABASE_URL=fresh_database))
    try:
        _wait_for_metrics(proc, port)
        # when the user presses Ctrl-C
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    # then it stops without a traceback and says so with 130
    assert proc.returncode == ExitCode.INTERRUPTED == 130, err
    assert "Traceback" not in err


def test_ctrl_c_stops_a_worker_after_celerys_warm_shutdown_with_exit_130(
    fresh_database: str, broker_url: str, tmp_path: Path,
) -> None:
    # given a worker of the fleet, consuming
    env = bare_env(tmp_path, SAGAFLEET_DATABASE_URL=fresh_database,
                   SAGAFLEET_BROKER_URL=broker_url,
                   SAGAFLEET_TOOLS="sagafleet.sandbox:trip_tool_set")
    from sagafleet.sandbox import install

    migrate_all(fresh_database)
    install(fresh_database)
    proc = _interruptible(["worker", "--loglevel", "INFO"], env)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # Celery logs "... ready." once it consumes
            if " ready." in line:
                break
        else:
            raise AssertionError(f"the worker never became ready: {proc.communicate()}")
        # when the user presses Ctrl-C
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    # then Celery's warm shutdown ran and the status says Ctrl-C, not success
    assert "Warm shutdown" in out + err
    assert proc.returncode == ExitCode.INTERRUPTED, err[-2000:]


def test_a_worker_that_stops_on_an_unrecoverable_error_exits_1_not_0(
    fresh_database: str, short_home: Path, tmp_path: Path,
) -> None:
    # given a Redis of this test's own that refuses EVALSHA, which the worker's atomic take
    # needs (a broker locked down by an ACL; its own server, so no other test sees the ACL)
    broker = embedded.start_redis(short_home)
    redis.Redis(unix_socket_path=str(broker.socket)).execute_command(
        "ACL", "SETUSER", "default", "-evalsha")
    from sagafleet.sandbox import install

    migrate_all(fresh_database)
    install(fresh_database)
    env = bare_env(tmp_path, SAGAFLEET_DATABASE_URL=fresh_database,
                   SAGAFLEET_BROKER_URL=broker.url,
                   SAGAFLEET_TOOLS="sagafleet.sandbox:trip_tool_set")
    # when a worker starts consuming from it
    result = sagafleet("worker", env=env)
    # then Celery stops it on the refusal, and its exit status says failure (Celery's
    # worker_main drops the status; a supervisor restarting on failure would see success)
    assert "Unrecoverable error" in result.stderr and "NoPermissionError" in result.stderr
    assert result.returncode == ExitCode.FAILURE, result.stderr[-2000:]


# -- the demo ----------------------------------------------------------------------------------

def test_the_demo_stops_the_embedded_broker_it_started_but_not_one_already_running(
    fresh_database: str, short_home: Path,
) -> None:
    env = bare_env(short_home, SAGAFLEET_DATABASE_URL=fresh_database)
    demo = ["demo", "--sagas", "1", "--workers", "1", "--fault-rate", "0", "--json"]
    # given an embedded Redis someone started before the demo
    assert sagafleet("embedded", "start", env=env).returncode == 0
    assert embedded_state.redis_running(short_home)
    # when the demo runs and ends, then that Redis still runs (it was not the demo's)
    first = sagafleet(*demo, env=env, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert embedded_state.redis_running(short_home)
    # given no Redis running, when the demo starts one, then it stops it at the end
    embedded.stop_redis(short_home)
    second = sagafleet(*demo, env=env, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert not embedded_state.redis_running(short_home)
    assert json.loads(sagafleet("embedded", "status", "--json", env=env).stdout)["running"] == {
        "postgres": False, "redis": False}
