"""Honest screens on the command line, on a real fleet: an approve or deny from a saga version
a colleague's answer left records nothing and exits 5 (conflict) naming who answered at which
version; a denied step reads denied in ``status`` and the finished saga shows no live phase
and no current step in ``list``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from fleet_harness import drive, drive_until_it_asks
from principal_support import issue_token
from read_model_support import project_database
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from saga_core.engine.events import ApprovalDenied, ApprovalGranted
from sagafleet.exit_codes import ExitCode
from workers.fleet import Fleet

pytestmark = pytest.mark.integration

GATED = TRIP_INPUT | {"amount": 250_000}  # above the trip's capture limit: a person approves


@pytest.fixture
def run(database, broker):
    """``sagafleet`` on the test's migrated database, acting with the token it is given."""
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker}
    env.pop("SAGAFLEET_TOKEN", None)

    def invoke(*args: str, token: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sagafleet", *args],
                              env={**env, "SAGAFLEET_TOKEN": token}, capture_output=True,
                              text=True, timeout=120, check=False)

    return invoke


def _waiting_trip(fleet: Fleet, key: str) -> str:
    """A trip whose holds ran (in this process) and whose capture waits for a person."""
    saga_id = fleet.client().start("trip", GATED, key=key).saga_id
    drive_until_it_asks(fleet, saga_id)
    return saga_id


def _ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    return json.loads(done.stdout)


def _answers(fleet: Fleet, saga_id: str) -> list[tuple[int, object]]:
    events = fleet.repo.load_history(saga_id).events
    return [(n, e) for n, e in enumerate(events, start=1)
            if isinstance(e, ApprovalGranted | ApprovalDenied)]


def test_a_stale_approve_or_deny_exits_5_naming_who_approved_and_at_which_version(
        run, database, fleet):
    ana = issue_token(database, "ana", ["approver"])
    bea = issue_token(database, "bea", ["approver"])
    # given a capture both approvers looked at, at the same version
    saga_id = _waiting_trip(fleet, "stale-1")
    seen = str(_ok(run("status", saga_id, "--json", token=bea))["version"])
    # when ana approves it from that version
    _ok(run("approve", saga_id, "capture_payment", "--seen-version", seen, "--json",
            token=ana))
    [(answered, grant)] = _answers(fleet, saga_id)
    assert isinstance(grant, ApprovalGranted) and grant.approver == "ana"
    before = fleet.repo.load(saga_id).version
    # then bea's approval from the version she saw exits 5, naming ana and the version
    # (--expected-version: the option's old name, still accepted)
    for argv in (["approve", saga_id, "capture_payment", "--seen-version", seen],
                 ["deny", saga_id, "capture_payment", "--reason", "no", "--expected-version",
                  seen],
                 ["approve", saga_id, "capture_payment"]):  # unbound: still not hers to give
        done = run(*argv, "--json", token=bea)
        assert done.returncode == ExitCode.CONFLICT, (argv, done.stdout, done.stderr)
        refusal = json.loads(done.stdout)
        assert f"already approved by ana at version {answered}" in refusal["message"], refusal
    # and the text form says it too
    done = run("approve", saga_id, "capture_payment", "--seen-version", seen, token=bea)
    assert done.returncode == ExitCode.CONFLICT
    assert f"already approved by ana at version {answered}" in done.stderr
    assert "nothing was recorded" in done.stderr
    # and nothing was recorded; ana's own second click is still a quiet no-op
    assert fleet.repo.load(saga_id).version == before
    _ok(run("approve", saga_id, "capture_payment", "--expected-version", seen, "--json",
            token=ana))
    assert len(_answers(fleet, saga_id)) == 1


def test_a_denied_step_reads_denied_in_status_and_the_finished_saga_in_list(
        run, database, fleet):
    bea = issue_token(database, "bea", ["approver"])
    # given a capture bea denied, and the holds undone after it
    saga_id = _waiting_trip(fleet, "denied-1")
    _ok(run("deny", saga_id, "capture_payment", "--reason", "not this trip", "--json",
            token=bea))
    assert drive(fleet, saga_id) is SagaStatus.COMPENSATED
    [(denied_at, _)] = _answers(fleet, saga_id)
    # when status is asked for
    view = _ok(run("status", saga_id, "--json", token=bea))
    # then the capture is denied, by bea, at the version her denial was recorded at
    capture = next(s for s in view["steps"] if s["step_id"] == "capture_payment"
                   and s["kind"] == "forward")
    assert capture["status"] == "denied"
    assert (capture["approval"]["approver"], capture["approval"]["answered_version"]) == (
        "bea", denied_at)
    assert view["status"] == "COMPENSATED" and view["pending_approvals"] == []
    assert not [s for s in view["steps"] if s["status"] == "awaiting_approval"]
    text = run("status", saga_id, token=bea)
    assert text.returncode == ExitCode.OK
    line = next(x for x in text.stdout.splitlines() if "capture_payment" in x and "forward" in x)
    assert "denied" in line and f"denied by bea at version {denied_at}" in line
    # and list shows the finished saga with no live phase and nothing current
    project_database(database)
    listed = _ok(run("list", "--json", token=bea))
    row = next(r for r in listed["sagas"] if r["saga_id"] == saga_id)
    assert (row["state"], row["phase"], row["current_steps"]) == ("COMPENSATED", "finished", [])
