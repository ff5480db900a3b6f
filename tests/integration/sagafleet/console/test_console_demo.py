"""The issue's "done when": a person runs the demo with --keep-servers, starts the console,
signs in with the token the demo prints for its approver, and answers what waits for a
person from the browser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from console_support import POLICY, csrf_of, sign_in
from read_model_support import project_all
from starlette.testclient import TestClient

from saga_core.engine.events import ApprovalGranted
from sagafleet.console.app import create_app
from sagafleet.console.service import console_for
from sagafleet.example_sagas import trip_tool_catalogue
from workers.fleet import Fleet, FleetConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_demo_hands_its_approver_over_to_the_console(fresh_database, broker_url,
                                                         tmp_path) -> None:
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url, "SAGAFLEET_HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "sagafleet", "demo", "--sagas", "2", "--workers", "1",
         "--fault-rate", "0", "--keep-servers", "--json"],
        env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    handoff = summary["console"]
    assert handoff["command"].endswith("sagafleet console")
    assert handoff["roles"] == ["approver", "operator"]
    waiting = summary["waiting_for_a_person"]
    assert len(waiting) == 3  # no faults: each expensive trip reached its capture's gate

    fleet = Fleet(FleetConfig(database_url=fresh_database, broker_url=broker_url),
                  trip_tool_catalogue())
    try:
        console = console_for(fleet, POLICY)
        project_all(console.read)
        with TestClient(create_app(console), follow_redirects=False) as browser:
            sign_in(browser, handoff["token"])
            page = browser.get("/queue").text
            assert all(f'data-saga="{saga_id}"' in page for saga_id in waiting)
            assert "demo-approver" in page
            card = page[page.index(f'data-saga="{waiting[0]}"'):]
            form = card[card.index('action="/actions/approve"'):]
            fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"',
                                     form[:form.index("</form>")]))
            assert fields["csrf"] == csrf_of(page)
            approved = browser.post("/actions/approve",
                                    data=fields | {"reason": "the customer confirmed"})
            assert approved.status_code == 303, approved.text
        grants = [e for e in fleet.repo.load_history(waiting[0]).events
                  if isinstance(e, ApprovalGranted)]
        assert [g.approver for g in grants] == ["demo-approver"]
    finally:
        fleet.close()
