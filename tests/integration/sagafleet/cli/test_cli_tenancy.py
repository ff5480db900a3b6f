"""The command line shows one tenant: the tenant of the principal its token proves.

Tenant A registers its own definition and starts a saga that comes to wait for an approval;
tenant B's principal, through every read command (status, audit, find, wait, list, queue,
stats, alerts) and through start, sees nothing of it, as if it did not exist. Tenant A sees
it all. A read command without a token reads nothing (exit 11).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from principal_support import issue_token
from read_model_support import project_database
from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from saga_core import due_work
from sagafleet.example_sagas import trip_definition
from sagafleet.exit_codes import ExitCode
from workers.fleet import Fleet

pytestmark = pytest.mark.integration


@pytest.fixture
def run(database, broker):
    """The command on the migrated database, acting with the token it is given."""
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker}
    env.pop("SAGAFLEET_TOKEN", None)

    def invoke(*args: str, token: str | None) -> subprocess.CompletedProcess[str]:
        acting = env if token is None else {**env, "SAGAFLEET_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=acting,
                              capture_output=True, text=True, timeout=120, check=False)

    return invoke


def _run_until_it_waits(fleet: Fleet, saga_id: str) -> None:
    """Run the saga's due steps in this process until nothing is due (it waits for a person)."""
    for _ in range(100):
        items = due_work(fleet.repo.load(saga_id).state, fleet.clock(), timedelta(0))
        if not items:
            return
        for item in items:
            if item.action in ("execute", "reconcile") and item.step_id and item.kind:
                fleet.executor.handle(StepCommand(saga_id=saga_id, step_id=item.step_id,
                                                  kind=item.kind, attempt=item.attempt))
            else:
                fleet.orchestrator.advance(saga_id)
    raise AssertionError(f"saga {saga_id} never came to wait")




def _doc(result: subprocess.CompletedProcess[str]) -> object:
    assert result.returncode == ExitCode.OK, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_tenant_b_sees_nothing_of_tenant_a_through_any_command(
    run, database, fleet, tmp_path: Path
):
    admin_a = issue_token(database, "admin-a", ["admin"], tenant="A")
    agent_a = issue_token(database, "agent-a", ["agent"], tenant="A")
    reader_a = issue_token(database, "ops-a", ["operator"], tenant="A")
    reader_b = issue_token(database, "ops-b", ["operator", "auditor"], tenant="B")
    agent_b = issue_token(database, "agent-b", ["agent"], tenant="B")
    # given tenant A's own definition, and A's saga of it waiting for an approval
    own = trip_definition().model_dump(mode="json", exclude={"tools"})
    path = tmp_path / "a_trip.yaml"
    path.write_text(yaml.safe_dump({**own, "name": "a_trip"}), encoding="utf-8")
    _doc(run("register", str(path), "--json", token=admin_a))
    started = _doc(run("start", "a_trip", "--input", json.dumps({**TRIP_INPUT, "amount": 250_000}),
                       "--key", "a-1", "--json", token=agent_a))
    assert isinstance(started, dict)
    saga_id = started["saga_id"]
    _run_until_it_waits(fleet, saga_id)
    project_database(database)

    # when tenant B reads every view, then each is empty or says "not found"
    for argv in (["status", saga_id], ["audit", saga_id], ["find", "a-1"],
                 ["wait", saga_id, "--timeout", "0"]):
        result = run(*argv, "--json", token=reader_b)
        assert result.returncode == ExitCode.NOT_FOUND, (argv, result.stdout, result.stderr)
    assert _doc(run("list", "--json", token=reader_b)) == {
        "tenant": "B", "sagas": [], "next_after": None}
    assert _doc(run("queue", "--json", token=reader_b)) == []
    stats = _doc(run("stats", "--json", token=reader_b))
    assert isinstance(stats, dict) and stats["metrics"]["definitions"] == []
    assert stats["metrics"]["tools"] == [] and stats["alerts"] == []
    assert _doc(run("alerts", "--json", token=reader_b)) == []
    # and B cannot start A's definition
    refused = run("start", "a_trip", "--input", json.dumps(TRIP_INPUT), "--json", token=agent_b)
    assert refused.returncode == ExitCode.NOT_FOUND
    assert json.loads(refused.stdout)["error"] == "DefinitionNotFound"

    # while tenant A sees its saga in every view
    assert _doc(run("status", saga_id, "--json", token=reader_a))["saga_id"] == saga_id  # type: ignore[index]
    listed = _doc(run("list", "--json", token=reader_a))
    assert isinstance(listed, dict) and [s["saga_id"] for s in listed["sagas"]] == [saga_id]
    (entry,) = _doc(run("queue", "--json", token=reader_a))  # type: ignore[misc]
    assert (entry["saga_id"], entry["entry"]) == (saga_id, "approval")
    stats_a = _doc(run("stats", "--json", token=reader_a))
    assert isinstance(stats_a, dict)
    assert [d["definition"] for d in stats_a["metrics"]["definitions"]] == ["a_trip"]
    assert run("audit", saga_id, "--json", token=reader_a).returncode == ExitCode.OK

    # and without a token no read command reads anything
    for argv in (["status", saga_id], ["list"], ["queue"], ["stats"]):
        result = run(*argv, "--json", token=None)
        assert result.returncode == ExitCode.UNAUTHENTICATED, (argv, result.stdout)


def test_register_refuses_a_shared_name_and_two_tenants_keep_one_name_apart(
    run, database, fleet, tmp_path: Path
):
    own = trip_definition().model_dump(mode="json", exclude={"tools"})
    # when tenant A registers a definition named like the shared trip
    shadow = tmp_path / "trip.yaml"
    shadow.write_text(yaml.safe_dump({**own, "description": "mine"}), encoding="utf-8")
    admin_a = issue_token(database, "admin-a", ["admin"], tenant="A")
    refused = run("register", str(shadow), "--json", token=admin_a)
    # then it is refused as a conflict naming the shared name
    assert refused.returncode == ExitCode.CONFLICT, refused.stdout + refused.stderr
    doc = json.loads(refused.stdout)
    assert doc["error"] == "SharedDefinitionName" and "'trip'" in doc["message"]
    # when A and B each register "refund_trip" with their own content
    for tenant in ("A", "B"):
        path = tmp_path / f"refund_{tenant}.yaml"
        path.write_text(yaml.safe_dump({**own, "name": "refund_trip", "description": tenant}),
                        encoding="utf-8")
        token = issue_token(database, f"admin-{tenant.lower()}", ["admin"], tenant=tenant)
        _doc(run("register", str(path), "--json", token=token))
    # then each tenant's start runs its own
    for tenant in ("A", "B"):
        agent = issue_token(database, f"agent-{tenant.lower()}", ["agent"], tenant=tenant)
        started = _doc(run("start", "refund_trip", "--input", json.dumps(TRIP_INPUT),
                           "--json", token=agent))
        assert isinstance(started, dict)
        loaded = fleet.repo.load(started["saga_id"], tenant=tenant)
        assert loaded.definition.description == tenant
