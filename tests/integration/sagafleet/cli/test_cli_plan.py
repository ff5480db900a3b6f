"""``sagafleet plan``: register an agent plan (named by its content, or as given) and, with
``--input``, start its saga; a bad plan is refused naming what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from principal_support import issue_token

from sagafleet.exit_codes import ExitCode

ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}


@pytest.fixture
def run(database, broker):
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker,
           "SAGAFLEET_TOKEN": issue_token(database, "planner", ["agent"], tenant="acme")}

    def invoke(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    return invoke


def test_a_plan_is_registered_then_started_with_its_input(run, fleet, tmp_path: Path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(ROOM_PLAN))
    # when the plan is registered alone, then again with an input, a name and a version
    registered = run("plan", str(plan), "--json")
    started = run("plan", str(plan), "--input", "{}", "--name", "room", "--version", "2",
                  "--key", "room-1", "--json")
    # then the first is named by its content, and the second started a saga on room v2
    assert registered.returncode == ExitCode.OK, registered.stderr
    assert json.loads(registered.stdout)["name"].startswith("agent-plan-")
    assert started.returncode == ExitCode.OK, started.stderr
    saga = json.loads(started.stdout)
    assert (saga["definition"], saga["definition_version"]) == ("room", 2)
    assert fleet.client(tenant="acme").find("room-1").saga_id == saga["saga_id"]


def test_a_plan_with_an_unknown_tool_is_refused_naming_it(run, tmp_path: Path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"goal": "x", "actions": [{"tool": "rockets.launch",
                                                          "args": {}}]}))
    for extra in ((), ("--dry-run",)):
        refused = run("plan", str(plan), *extra, "--json")
        assert refused.returncode == ExitCode.INVALID_INPUT, refused.stdout + refused.stderr
        assert "rockets.launch" in refused.stdout
