"""``sagafleet start|plan --lineage``: who and what asks, as JSON, @FILE or stdin, recorded on
SagaStarted (``audit`` shows it, ``find --trace`` finds it); a malformed one is a typed
error naming each bad field, and starts nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from principal_support import issue_token

from sagafleet.exit_codes import ExitCode
from sagafleet.migrate import migrate_all

TRIP = {"customer_email": "ada@example.com", "flight_id": "FL1", "hotel_id": "HT1",
        "nights": 2, "amount": 250_000, "currency": "EUR", "card_token": "tok_visa_4242"}
ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}
TRACE = "5bf92f3577b34da6a3ce929d0e0e4737"
ASKED = {"agent_request_id": "req-cli-1", "model_name": "claude-opus", "model_version": "4.5",
         "prompt_version": "travel-policy@7", "trace_id": TRACE}


@pytest.fixture
def run(fresh_database, broker_url):
    migrate_all(fresh_database)
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url,
           "SAGAFLEET_TOKEN": issue_token(fresh_database, "cli", ("agent", "admin"))}
    auditor = issue_token(fresh_database, "ada", ("auditor",))

    def invoke(*args: str, stdin: str | None = None,
               audit: bool = False) -> subprocess.CompletedProcess[str]:
        acting = {**env, "SAGAFLEET_TOKEN": auditor} if audit else env
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=acting,  # noqa: S603
                              input=stdin, capture_output=True, text=True, timeout=120,
                              check=False)

    return invoke


def test_start_records_the_lineage_given_inline_from_a_file_or_stdin(run, tmp_path: Path):
    # given the lineage inline, in a file, and on stdin, each for its own start
    path = tmp_path / "lineage.json"
    path.write_text(json.dumps({**ASKED, "agent_request_id": "req-cli-file"}), encoding="utf-8")
    inline = run("start", "trip", "--input", json.dumps(TRIP), "--key", "inline",
                 "--lineage", json.dumps(ASKED), "--json")
    from_file = run("start", "trip", "--input", json.dumps(TRIP), "--key", "file",
                    "--lineage", f"@{path}", "--json")
    from_stdin = run("start", "trip", "--input", json.dumps(TRIP), "--key", "stdin",
                     "--lineage", "-", "--json", stdin=json.dumps({"model_name": "m"}))
    for result in (inline, from_file, from_stdin):
        assert result.returncode == ExitCode.OK, result.stderr
    # then audit shows each as given (stdin's with a trace id of its own)
    shown = {}
    for key, result in (("inline", inline), ("file", from_file), ("stdin", from_stdin)):
        saga_id = json.loads(result.stdout)["saga_id"]
        audit = run("audit", saga_id, "--json", audit=True)
        assert audit.returncode == ExitCode.OK, audit.stderr
        shown[key] = json.loads(audit.stdout)["lineage"]
    assert shown["inline"] == ASKED
    assert shown["file"] == {**ASKED, "agent_request_id": "req-cli-file"}
    assert shown["stdin"]["model_name"] == "m" and len(shown["stdin"]["trace_id"]) == 32
    assert shown["stdin"]["trace_id"] != TRACE
    # and the trace finds the two sagas that carry it
    traced = run("find", "--trace", TRACE, "--json", audit=True)
    assert traced.returncode == ExitCode.OK, traced.stderr
    assert {s["lineage"]["agent_request_id"] for s in json.loads(traced.stdout)["sagas"]} == {
        "req-cli-1", "req-cli-file"}


def test_a_plan_started_from_the_command_line_records_its_lineage(run, tmp_path: Path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(ROOM_PLAN), encoding="utf-8")
    started = run("plan", str(plan), "--input", "{}", "--key", "room",
                  "--lineage", json.dumps(ASKED), "--json")
    assert started.returncode == ExitCode.OK, started.stderr
    audit = run("audit", json.loads(started.stdout)["saga_id"], "--json", audit=True)
    assert json.loads(audit.stdout)["lineage"] == ASKED
    # a lineage without an input starts nothing, so it is a usage error
    alone = run("plan", str(plan), "--lineage", json.dumps(ASKED), "--json")
    assert alone.returncode == ExitCode.USAGE and "--lineage" in alone.stdout + alone.stderr


def test_a_malformed_lineage_is_a_typed_error_naming_each_field_and_starts_nothing(
        run, tmp_path: Path):
    bad = run("start", "trip", "--input", json.dumps(TRIP), "--key", "bad",
              "--lineage", json.dumps({"trace_id": "xyz", "model_version": 4, "model": "m"}),
              "--json")
    assert bad.returncode == ExitCode.INVALID_INPUT, bad.stderr
    doc = json.loads(bad.stdout)
    assert doc["error"] == "InvalidLineage" and doc["message"].startswith("--lineage:")
    for named in ("trace_id must be 32", "model_version must be a string", "'model'"):
        assert named in doc["message"]
    assert "Traceback" not in bad.stderr
    not_object = run("start", "trip", "--input", json.dumps(TRIP), "--lineage", "[1]", "--json")
    assert not_object.returncode == ExitCode.INVALID_INPUT
    assert "--lineage must be an object" in not_object.stdout
    not_json = run("start", "trip", "--input", json.dumps(TRIP), "--lineage", "{x", "--json")
    assert not_json.returncode == ExitCode.INVALID_INPUT and "--lineage" in not_json.stdout
    missing = run("start", "trip", "--input", json.dumps(TRIP),
                  "--lineage", f"@{tmp_path / 'nope.json'}", "--json")
    assert missing.returncode == ExitCode.NOT_FOUND and "--lineage" in missing.stdout
    both = run("start", "trip", "--input", "-", "--lineage", "-", "--json", stdin="{}")
    assert both.returncode == ExitCode.USAGE
    assert run("find", "bad", "--json", audit=True).returncode == ExitCode.NOT_FOUND
