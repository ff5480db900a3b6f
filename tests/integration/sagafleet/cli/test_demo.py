"""The main job: `sagafleet demo --json` runs a real fleet and proves its own claims."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg


def test_demo_runs_sagas_with_faults_and_reports_no_duplicates(
    fresh_database, broker_url, tmp_path
):
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url, "SAGAFLEET_HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "sagafleet", "demo", "--sagas", "8", "--workers", "2",
         "--fault-rate", "0.3", "--seed", "11", "--json"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    # the documented keys, and the invariants the demo exists to show
    for key in ("terminal_states", "non_terminal", "duplicate_effects", "elapsed_s",
                "sagas_per_s"):
        assert key in summary
    assert summary["duplicate_effects"] == 0 and summary["non_terminal"] == 0
    assert summary["invariant_violations"] == []
    assert sum(summary["terminal_states"].values()) == 8
    # the operator let one approval expire, and it was asked again
    assert summary["approvals"]["left_to_expire"] is not None
    assert summary["approvals"]["requested"] > summary["approvals"]["granted"]
    assert sum(summary["faults_injected"].values()) > 0
    # and every answer was given by the approver the directory authenticated by its token
    assert summary["approvals"]["approver"] == {
        "name": "demo-approver", "kind": "person", "roles": ["approver", "operator"],
        "authenticated": True}
    with psycopg.connect(fresh_database) as conn:
        approvers = conn.execute(
            "SELECT DISTINCT data->>'approver' FROM eventstore.events"
            " WHERE event_type IN ('ApprovalGranted', 'ApprovalDenied')").fetchall()
        kept = conn.execute("SELECT kind, roles FROM fleet.principals"
                            " WHERE tenant = 'default' AND name = 'demo-approver'").fetchall()
    assert approvers == [("demo-approver",)]
    assert kept == [("person", ["approver", "operator"])]
    assert "console" not in summary and summary["waiting_for_a_person"] == []
