"""``sagafleet wait``: exit 0 once the saga finished or waits for a person, exit 10
(timed-out) when it did neither in time; another tenant's saga and a bad timeout are named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from principal_support import issue_token
from trip_inputs import TRIP_INPUT

from sagafleet.exit_codes import ExitCode


@pytest.fixture
def run(database, broker):
    """The command as an operator of tenant acme (its token), unless given another token."""
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker,
           "SAGAFLEET_TOKEN": issue_token(database, "watcher", ["operator"], tenant="acme")}

    def invoke(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        acting = env if token is None else {**env, "SAGAFLEET_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=acting,
                              capture_output=True, text=True, timeout=300, check=False)

    return invoke


def test_wait_times_out_then_returns_once_the_saga_waits_for_approval(fleet, workers, run):
    # given a trip above the approval limit, started while no worker runs
    saga = fleet.client(tenant="acme").start("trip", {**TRIP_INPUT, "amount": 250_000},
                                             key="cli-wait")
    # when the operator waits briefly: it times out, with a named exit code
    timed_out = run("wait", saga.saga_id, "--timeout", "0.3", "--json")
    assert timed_out.returncode == ExitCode.TIMED_OUT == 10, timed_out.stderr
    doc = json.loads(timed_out.stdout)
    assert doc["timed_out"] and not doc["settled"] and doc["saga"]["status"] == "RUNNING"
    text = run("wait", saga.saga_id, "--timeout", "0")
    assert text.returncode == ExitCode.TIMED_OUT and "timed out" in text.stdout
    # when a real worker runs it: the wait returns once the capture waits for approval
    workers.start(1)
    settled = run("wait", saga.saga_id, "--timeout", "240", "--json")
    assert settled.returncode == ExitCode.OK, settled.stdout + settled.stderr
    doc = json.loads(settled.stdout)
    assert doc["settled"] and not doc["timed_out"]
    assert [p["step_id"] for p in doc["saga"]["pending_approvals"]] == ["capture_payment"]
    assert TRIP_INPUT["card_token"] not in settled.stdout
    text = run("wait", saga.saga_id)
    assert text.returncode == ExitCode.OK and "waits for a person" in text.stdout


def test_wait_names_another_tenants_saga_and_a_bad_timeout(fleet, run, database):
    saga = fleet.client(tenant="acme").start("trip", TRIP_INPUT, key="cli-wait-2")
    globex = issue_token(database, "watcher", ["operator"], tenant="globex")
    other = run("wait", saga.saga_id, "--timeout", "1", "--json", token=globex)
    assert other.returncode == ExitCode.NOT_FOUND
    assert json.loads(other.stdout)["error"] == "SagaNotFound"
    bad = run("wait", saga.saga_id, "--timeout", "-1")
    assert bad.returncode == ExitCode.INVALID_INPUT and "wait timeout" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert "10  timed-out" in run("--help").stdout
