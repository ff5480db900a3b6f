"""Authority end to end, on the real fleet (PostgreSQL, Redis, a ``sagafleet worker``):
an agent of acme signs a plan whose capture is above the catalogue gate's limit and starts
it; the saga waits for a person. Every wrong hand that reaches for the approval — the agent
itself, another tenant's approver, a revoked approver, an acme person without the role,
the saga's own starter, a grant too small for the amount — is refused with its exit code
and leaves the saga's log as it was. A proper acme approver approves, the saga completes,
the audit names her; tenant globex can neither see nor touch any of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from principal_support import token_for
from read_model_support import project_database
from signed_agent import agent_signer, bare_celery, send
from trip_inputs import TRIP_INPUT

from saga_core.access.roles import PrincipalKind
from saga_core.contracts import SagaStatus
from saga_core.errors import ApprovalOutOfScope
from sagafleet.exit_codes import ExitCode
from workers.fleet import Fleet

pytestmark = pytest.mark.integration

# Above the sandbox catalogue's gate on payments.capture (limit 100000 cents).
AMOUNT = 250_000
BIG_CAPTURE = {"goal": "pay for the trip", "actions": [
    {"tool": "payments.capture",
     "args": {"amount": AMOUNT, "currency": "EUR", "card_token": "${input.card_token}"}}]}


@pytest.fixture
def run(database, broker):
    """``sagafleet`` on the fleet's database, acting with the token it is given (in the
    environment), or with none (a call may pass ``--token-file`` itself)."""
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker}
    env.pop("SAGAFLEET_TOKEN", None)

    def invoke(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        acting = env if token is None else {**env, "SAGAFLEET_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=acting,  # noqa: S603
                              capture_output=True, text=True, timeout=120, check=False)

    return invoke


def _events(database: str, saga_id: str) -> list[tuple[str, dict[str, Any]]]:
    with psycopg.connect(database) as conn:
        return [(kind, data) for kind, data in conn.execute(
            "SELECT event_type, data FROM eventstore.events WHERE stream_id = %s"
            " ORDER BY stream_version", (f"saga-{saga_id}",))]


def _eventually(what: str, probe: Any) -> Any:
    """``probe()`` once it answers something truthy (the bound only ends a hung run)."""
    deadline = time.monotonic() + 90
    while not (found := probe()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)
    return found




def _refused(result: subprocess.CompletedProcess[str], code: ExitCode, error: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert json.loads(result.stdout)["error"] == error, result.stdout


def test_an_agents_large_capture_is_approved_only_by_a_proper_approver_of_its_tenant(
        fleet: Fleet, database, broker, workers, run, wait_settled, tmp_path: Path):
    # given a worker, acme's agent with a signing key, and the people of acme and globex
    workers.start(1)
    celery = bare_celery(broker)
    signer = agent_signer(fleet, "acme", "travel-agent")
    agent_token = token_for(fleet, "travel-agent", ["agent"], tenant="acme",
                            kind=PrincipalKind.AGENT)
    ada_file = tmp_path / "ada.token"
    ada_file.write_text(token_for(fleet, "ada", ["approver"], tenant="acme"))
    ada_file.chmod(0o600)
    oscar = token_for(fleet, "oscar", ["operator"], tenant="acme")  # may act, not approve
    rita = token_for(fleet, "rita", ["approver"], tenant="acme")
    fleet.principals.revoke("acme", "rita", "left the company")
    gus = token_for(fleet, "gus", ["approver", "operator", "auditor"], tenant="globex")

    # when the agent signs its plan (the capture above the gate's limit), then starts it
    send(celery, signer.submit_plan(BIG_CAPTURE, name="big-capture"))
    _eventually("the plan registered", lambda: _plan_registered(database))
    card = fleet.client(tenant="acme").put_secret("tok_visa_4242").as_input()
    send(celery, signer.start_saga("big-capture", {"card_token": card}, key="big-1",
                                   reason="book it"))
    saga_id = _eventually("the saga started",
                          lambda: getattr(fleet.client(tenant="acme").find("big-1"),
                                          "saga_id", None))
    # then it waits for a person: nothing was captured
    _eventually("the approval requested", lambda: any(
        kind == "ApprovalRequested" for kind, _ in _events(database, saga_id)))
    assert not any(kind == "StepScheduled" and "capture" in str(data)
                   for kind, data in _events(database, saga_id))
    project_database(database)
    queued = run("queue", "--json", "--token-file", str(ada_file))
    assert queued.returncode == ExitCode.OK, queued.stdout + queued.stderr
    (entry,) = json.loads(queued.stdout)
    assert (entry["saga_id"], entry["entry"]) == (saga_id, "approval")
    gate = entry["evidence"]["details"]["gate"]
    assert gate["role"] == "approver" and gate["risk_class"] == "money", gate
    step = entry["step_id"]
    before = _events(database, saga_id)

    # when each wrong hand tries to approve it through the command line
    wrong_hands = {
        "the agent itself": (agent_token, ExitCode.FORBIDDEN, "ApproverRefused"),
        "globex's approver": (gus, ExitCode.NOT_FOUND, "SagaNotFound"),
        "a revoked approver": (rita, ExitCode.UNAUTHENTICATED, "Unauthenticated"),
        "an acme person without the role": (oscar, ExitCode.FORBIDDEN, "ApproverRefused"),
    }
    for who, (token, code, error) in wrong_hands.items():
        result = run("approve", saga_id, step, "--json", token=token)
        # then each is refused with its own code, and the saga's log is as it was
        assert result.returncode == code, (who, result.stdout, result.stderr)
        assert json.loads(result.stdout)["error"] == error, (who, result.stdout)
        assert _events(database, saga_id) == before, who
    # and globex's principal can neither deny nor cancel the waiting saga, nor see it queued
    for argv in (["deny", saga_id, step, "--reason", "mine"], ["cancel", saga_id]):
        _refused(run(*argv, "--json", token=gus), ExitCode.NOT_FOUND, "SagaNotFound")
    assert json.loads(run("queue", "--json", token=gus).stdout) == []
    assert _events(database, saga_id) == before
    assert _sagas_started(database) == {"acme": 1}
    # and a grant up to less than the amount, on the command line and through the client
    narrow = run("approve", saga_id, step, "--up-to", str(AMOUNT - 1), "--json",
                 "--token-file", str(ada_file))
    _refused(narrow, ExitCode.CONFLICT, "ApprovalOutOfScope")
    ada = fleet.client_for(fleet.authenticate(ada_file.read_text()))
    with pytest.raises(ApprovalOutOfScope, match="does not cover amount 250000"):
        ada.approve(saga_id, step, up_to=AMOUNT - 1)
    assert _events(database, saga_id) == before

    # when ada, an approver of acme, approves with her token file
    approved = run("approve", saga_id, step, "--json", "--token-file", str(ada_file))
    assert approved.returncode == ExitCode.OK, approved.stdout + approved.stderr
    # then the saga completes, and the grant and the audit name her
    assert wait_settled(saga_id) is SagaStatus.COMPLETED
    (grant,) = [data for kind, data in _events(database, saga_id) if kind == "ApprovalGranted"]
    assert (grant["approver"], grant["roles"]) == ("ada", ["approver"])
    audit = run("audit", saga_id, "--json", "--token-file", str(ada_file))
    assert audit.returncode == ExitCode.OK, audit.stdout + audit.stderr
    granted = [e for e in json.loads(audit.stdout)["timeline"] if e["type"] == "ApprovalGranted"]
    assert [e["actor"] for e in granted] == ["ada"], granted
    after = _events(database, saga_id)

    # and globex's principal can neither list, read, audit nor cancel acme's saga
    project_database(database)
    listed = run("list", "--json", token=gus)
    assert listed.returncode == ExitCode.OK and json.loads(listed.stdout)["sagas"] == []
    for argv in (["status", saga_id], ["audit", saga_id], ["cancel", saga_id]):
        result = run(*argv, "--json", token=gus)
        _refused(result, ExitCode.NOT_FOUND, "SagaNotFound")
    assert _events(database, saga_id) == after
    assert _sagas_started(database) == {"acme": 1}


def _sagas_started(database: str) -> dict[str, int]:
    with psycopg.connect(database) as conn:
        return dict(conn.execute("SELECT tenant_id, count(*) FROM eventstore.events WHERE"
                                 " event_type = 'SagaStarted' GROUP BY tenant_id").fetchall())


def _plan_registered(database: str) -> bool:
    with psycopg.connect(database) as conn:
        return bool(conn.execute("SELECT 1 FROM eventstore.definitions WHERE name ="
                                 " 'big-capture'").fetchall())


def test_the_person_who_started_a_large_capture_cannot_approve_it(
        fleet: Fleet, database, broker, workers, run):
    # given an acme person who may start sagas and approve captures
    workers.start(1)
    paula = token_for(fleet, "paula", ["agent", "approver"], tenant="acme")
    started = run("start", "trip", "--input", json.dumps(
        {**TRIP_INPUT, "card_token": fleet.client(tenant="acme").put_secret(
            TRIP_INPUT["card_token"]).as_input(), "amount": AMOUNT}),
        "--key", "paula-1", "--json", token=paula)
    assert started.returncode == ExitCode.OK, started.stdout + started.stderr
    saga_id = json.loads(started.stdout)["saga_id"]
    _eventually("the approval requested", lambda: any(
        kind == "ApprovalRequested" for kind, _ in _events(database, saga_id)))
    before = _events(database, saga_id)
    # when she approves the capture of the saga she started herself
    result = run("approve", saga_id, "capture_payment", "--json", token=paula)
    # then four eyes refuse her, and nothing was recorded
    _refused(result, ExitCode.FORBIDDEN, "ApproverRefused")
    assert "four" in result.stdout.lower() or "starter" in result.stdout.lower(), result.stdout
    assert _events(database, saga_id) == before
