"""Agent commands sent while PostgreSQL is down are retried, not lost: once it is back, every
one of them starts its saga, once. The test runs its own embedded PostgreSQL (in a temporary
SAGAFLEET_HOME), since it stops it; the broker is the test broker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery import Celery
from fleet_harness import WorkerProcesses, install_everything, redis_client
from principal_support import issue_token
from signed_agent import agent_signer, send
from trip_inputs import TRIP_INPUT

from sagafleet import embedded
from sagafleet.agent import CommandSigner
from sagafleet.example_sagas import trip_tool_catalogue
from workers.fleet import Fleet, FleetConfig
from workers.tasks import keyless_start_key

TENANT = "outage"


@pytest.fixture
def own_postgres() -> Iterator[tuple[Path, str]]:
    """An embedded PostgreSQL of this test's own (home, URL), migrated; removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="sfo-", dir="/tmp"))
    try:
        url = embedded.start_postgres(home).url
        install_everything(url)
        yield home, url
    finally:
        embedded.stop_postgres(home)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def broker(broker_url: str) -> Iterator[str]:
    """The test broker, emptied before and after the test."""
    client = redis_client(broker_url)
    client.flushdb()
    yield broker_url
    client.flushdb()
    client.close()


def _start_postgres_again(home: Path) -> str:
    # pgserver remembers a server per process: a fresh process starts the stopped cluster.
    code = ("import sys; from pathlib import Path; from sagafleet import embedded;"
            " print(embedded.start_postgres(Path(sys.argv[1])).url)")
    done = subprocess.run([sys.executable, "-c", code, str(home)],  # noqa: S603
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def _eventually(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except psycopg.OperationalError:
            pass  # the server is still coming back
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _started_keys(url: str) -> list[str]:
    with psycopg.connect(url, connect_timeout=2) as conn:
        rows = conn.execute(
            "SELECT data->>'idempotency_key' FROM eventstore.events"
            " WHERE event_type = 'SagaStarted' AND tenant_id = %s", (TENANT,)).fetchall()
    return [key for (key,) in rows]


def _retried_task_ids(broker: str) -> set[str]:
    """Task ids of command messages in the broker that were already tried and put back for
    later (queued, or held by the worker until their countdown ends)."""
    client = redis_client(broker)
    try:
        queued = [json.loads(raw) for raw in client.lrange("sagafleet.commands", 0, -1)]
        held = [json.loads(raw)[0] for raw in client.hvals("unacked")]
    finally:
        client.close()
    return {m["headers"]["id"] for m in queued + held if m["headers"].get("retries", 0) >= 1}


def _deposit(url: str) -> dict[str, Any]:
    """The trip input as an agent sends it over the broker: its card token deposited first
    (with ``sagafleet secrets put``, while the database is up) and carried as a ref."""
    token = issue_token(url, "depositor", ["agent"], tenant=TENANT)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("sagafleet")), "secrets", "put", "--json"],
        input=TRIP_INPUT["card_token"], capture_output=True, text=True,
        env={**os.environ, "SAGAFLEET_DATABASE_URL": url, "SAGAFLEET_TOKEN": token},
        check=True, timeout=120)
    return {**TRIP_INPUT, "card_token": json.loads(done.stdout)["secret_ref"]}


def _signer(url: str, broker: str) -> CommandSigner:
    """An agent of the tenant with a signing key (added while the database is up)."""
    fleet = Fleet(FleetConfig(database_url=url, broker_url=broker), trip_tool_catalogue())
    try:
        return agent_signer(fleet, TENANT)
    finally:
        fleet.close()


def test_commands_sent_while_postgres_is_down_all_start_their_sagas_once_it_is_back(
    own_postgres: tuple[Path, str], broker: str, tmp_path: Path
) -> None:
    home, url = own_postgres
    workers = WorkerProcesses(url, broker, tmp_path)
    agent = Celery("agent", broker=broker, set_as_current=False)
    agent.conf.update(task_serializer="json", accept_content=["json"])
    try:
        # given a worker that handles commands (a first one took effect)
        workers.start(1, args=("--concurrency", "3"))
        signer = _signer(url, broker)
        send(agent, signer.start_saga("trip", _deposit(url), key="before"))
        # and an agent that deposited its secrets before the outage
        inputs = [_deposit(url) for _ in range(3)]
        _eventually(lambda: _started_keys(url) == ["before"], "the first start never ran")
        # when PostgreSQL stops, and agents send commands (with and without a key)
        assert embedded.stop_postgres(home)
        keyless = signer.start_saga("trip", inputs[2])
        sent = [send(agent, signer.start_saga("trip", inputs[0], key="during-1")),
                send(agent, signer.start_saga("trip", inputs[1], key="during-2")),
                send(agent, keyless)]
        # then each is tried, and put back for later rather than dropped or dead-lettered
        _eventually(lambda: _retried_task_ids(broker) >= set(sent),
                    "the commands were not retried while the database was down")
        # when PostgreSQL is back
        assert _start_postgres_again(home) == url
        # then every command started its saga, once
        command_id = json.loads(keyless[1]["envelope"])["command_id"]
        expected = {"before", "during-1", "during-2", keyless_start_key(signer.kid, command_id)}
        _eventually(lambda: set(_started_keys(url)) == expected,
                    "not every command started its saga after the database came back")
        assert sorted(_started_keys(url)) == sorted(expected)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM fleet.dead_letters").fetchone() == (0,)
        assert all(proc.poll() is None for proc in workers.procs)  # no worker died of it
    finally:
        workers.stop()
