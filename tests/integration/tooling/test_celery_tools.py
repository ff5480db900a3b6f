"""Celery's own tools on a running fleet: ``celery -A sagafleet.celery inspect ...`` and
``events`` against a real ``sagafleet worker`` on real Redis, and the switch that turns the
workers' remote control off for a locked-down broker."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from fleet_harness import WorkerProcesses, worker_env

from workers.tasks import FLEET_TASKS

APP = "sagafleet.celery"
DEADLINE_S = 60.0


def celery_cli(broker: str, database: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``celery -A sagafleet.celery ARGS`` as an operator would run it, with the fleet's env."""
    return subprocess.run(  # noqa: S603 - our own interpreter and celery's CLI
        [sys.executable, "-m", "celery", "-A", APP, *args],
        env=worker_env(database, broker), capture_output=True, text=True, timeout=120,
        check=False,  # a refusal (no node replied) is an answer the tests read
    )


def replies(broker: str, database: str, command: str) -> dict[str, object]:
    """The workers' answers to ``inspect COMMAND --json`` by node (empty when none replied)."""
    done = celery_cli(broker, database, "inspect", command, "--json", "--timeout", "2")
    if done.returncode != 0:
        assert "No nodes replied" in done.stdout + done.stderr, done.stderr
        return {}
    answer = json.loads(done.stdout)
    assert isinstance(answer, dict), done.stdout
    return answer


def wait_for_replies(broker: str, database: str, command: str) -> dict[str, object]:
    """Ask until a worker answers ``inspect COMMAND`` (it may still be starting)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        answer = replies(broker, database, command)
        if answer:
            return answer
    raise AssertionError(f"no worker answered `inspect {command}`")


def wait_for_log(path: Path, text: str) -> None:
    """Wait until a worker's log holds ``text``."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {text!r}")


def test_a_running_worker_answers_inspect_and_lists_the_fleets_tasks(
        database: str, broker: str, workers: WorkerProcesses) -> None:
    # Given a real fleet worker with the defaults (remote control on)
    [worker] = workers.start(1)

    # When an operator pings through the documented app path, Then the worker answers
    pong = wait_for_replies(broker, database, "ping")
    [node] = pong
    assert node.endswith(f":{worker.pid}")  # the worker id is host:pid
    assert pong[node] == {"ok": "pong"}

    # And it lists every task of the fleet, and what it is running now (nothing)
    registered = wait_for_replies(broker, database, "registered")
    assert set(FLEET_TASKS) <= set(registered[node])  # type: ignore[arg-type]
    assert wait_for_replies(broker, database, "active") == {node: []}


def test_celery_events_sees_the_workers_heartbeats(
        database: str, broker: str, workers: WorkerProcesses, tmp_path: Path) -> None:
    # Given a running worker
    [worker] = workers.start(1)
    wait_for_replies(broker, database, "ping")

    # When an operator dumps the event stream, Then the worker's heartbeats arrive
    dump = tmp_path / "events.log"
    with dump.open("w") as out:
        events = subprocess.Popen(  # noqa: S603 - our own interpreter and celery's CLI
            [sys.executable, "-m", "celery", "-A", APP, "events", "--dump"],
            env=worker_env(database, broker), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_log(dump, "heartbeat: active=")
    finally:
        events.terminate()
        events.wait(30)
    assert f":{worker.pid} [" in dump.read_text()  # the node name is celery@host:pid


def test_with_remote_control_off_the_worker_does_not_answer(
        database: str, broker: str, workers: WorkerProcesses, tmp_path: Path) -> None:
    # Given a worker started with the switch off, up and consuming
    workers.start(1, extra_env={"SAGAFLEET_CELERY_REMOTE_CONTROL": "false"},
                  args=("--loglevel", "INFO"))
    wait_for_log(tmp_path / "worker-0.log", " ready.")

    # When an operator pings it, Then nothing answers within the timeout
    done = celery_cli(broker, database, "inspect", "ping", "--json", "--timeout", "2")
    assert done.returncode != 0
    assert "No nodes replied" in done.stdout + done.stderr


def free_port() -> int:
    """A TCP port nothing listens on now (for Flower)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def flower_workers(port: int) -> dict[str, object]:
    """Flower's ``/api/workers`` (asking the workers afresh), or empty while it starts."""
    url = f"http://127.0.0.1:{port}/api/workers?refresh=1"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - our own Flower
            workers = json.loads(answer.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return {}
    assert isinstance(workers, dict), workers
    return workers


def test_flower_lists_the_running_worker(
        database: str, broker: str, workers: WorkerProcesses, tmp_path: Path) -> None:
    # Given a running worker and Flower on the documented app path
    [worker] = workers.start(1)
    port = free_port()
    env = worker_env(database, broker) | {"FLOWER_UNAUTHENTICATED_API": "true"}
    with (tmp_path / "flower.log").open("w") as out:
        flower = subprocess.Popen(  # noqa: S603 - our own interpreter and Flower
            [sys.executable, "-m", "celery", "-A", APP, "flower", "--address=127.0.0.1",
             f"--port={port}"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # When its API is asked for the workers, Then it lists ours with the fleet's tasks
        deadline = time.monotonic() + DEADLINE_S
        listed: dict[str, object] = {}
        while not listed and time.monotonic() < deadline:
            listed = flower_workers(port)
            time.sleep(0.5)
    finally:
        flower.terminate()
        flower.wait(30)
    assert listed, (tmp_path / "flower.log").read_text()
    [node] = listed
    assert node.endswith(f":{worker.pid}")
    assert set(FLEET_TASKS) <= set(listed[node]["registered"])  # type: ignore[index]
