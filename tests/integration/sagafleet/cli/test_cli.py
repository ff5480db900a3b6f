"""The console command: --json documents, named exit codes, typed errors (no tracebacks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest
import yaml
from principal_support import issue_token

from sagafleet.example_sagas import trip_definition
from sagafleet.exit_codes import ExitCode
from sagafleet.migrate import migrate_all

TRIP = {"customer_email": "ada@example.com", "flight_id": "FL1", "hotel_id": "HT1",
        "nights": 2, "amount": 250_000, "currency": "EUR", "card_token": "tok_visa_4242"}


@pytest.fixture
def run(fresh_database, broker_url):
    """The command on a migrated database, acting (by default) with the token of ``cli``, a
    principal of tenant default that may start, register and resolve."""
    migrate_all(fresh_database)
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url,
           "SAGAFLEET_TOKEN": issue_token(fresh_database, "cli", ("agent", "admin", "operator"))}

    def invoke(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        acting = env if token is None else {**env, "SAGAFLEET_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=acting,
                              capture_output=True, text=True, timeout=120, check=False)

    return invoke


def test_start_status_and_idempotent_retry_as_json(run):
    first = run("start", "trip", "--input", json.dumps(TRIP), "--key", "cli-1", "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["created"] and doc["status"] == "RUNNING" and doc["definition"] == "trip"
    again = json.loads(run("start", "trip", "--input", json.dumps(TRIP), "--key", "cli-1",
                           "--json").stdout)
    assert again["saga_id"] == doc["saga_id"] and not again["created"]
    status = run("status", doc["saga_id"], "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["saga_id"] == doc["saga_id"]
    # the secret card token never shows up in what the command prints
    assert "tok_visa_4242" not in first.stdout + status.stdout


def test_bad_input_is_a_typed_error_naming_every_field(run):
    bad = {**TRIP, "nights": "two", "currency": 5}
    del bad["flight_id"]
    result = run("start", "trip", "--input", json.dumps(bad), "--json")
    assert result.returncode == 3
    doc = json.loads(result.stdout)
    assert doc["error"] == "InputValidationError"
    for field in ("input.nights", "input.currency", "input.flight_id"):
        assert field in doc["message"]
    assert "Traceback" not in result.stderr


def test_input_that_is_not_json_and_unknown_sagas_have_named_exit_codes(run, fresh_database):
    assert run("start", "trip", "--input", "{nope").returncode == 3
    missing = run("status", "00000000-0000-0000-0000-000000000000", "--json")
    assert missing.returncode == 4 and json.loads(missing.stdout)["error"] == "SagaNotFound"
    other = run("start", "trip", "--input", json.dumps(TRIP), "--key", "k", "--json",
                token=issue_token(fresh_database, "agent-a", ["agent"], tenant="a"))
    saga_id = json.loads(other.stdout)["saga_id"]
    # another tenant cannot see it
    reader_b = issue_token(fresh_database, "reader-b", ["auditor"], tenant="b")
    assert run("status", saga_id, token=reader_b).returncode == 4


def test_approval_from_the_command_line(run, fresh_database):
    doc = json.loads(run("start", "trip", "--input", json.dumps(TRIP), "--key", "ap",
                         "--json").stdout)
    result = run("approve", doc["saga_id"], "capture_payment", "--json",
                 token=issue_token(fresh_database, "alice"))
    # nothing is pending yet (no worker ran the holds): a typed, named refusal
    assert result.returncode == 5
    assert json.loads(result.stdout)["error"] == "ApprovalNotPending"


def test_help_documents_exit_codes(run):
    result = run("--help")
    assert result.returncode == 0 and "exit codes:" in result.stdout
    assert "invalid-input" in result.stdout and "not-found" in result.stdout


def test_register_a_definition_file_then_start_it(run, tmp_path):
    # given the trip under another name, as a YAML file an operator keeps in version control
    spec = trip_definition().model_dump(mode="json") | {"name": "weekend_trip"}
    path = tmp_path / "weekend_trip.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    # when it is registered (twice: the second is a no-op with the same hash)
    first = run("register", str(path), "--json")
    assert first.returncode == 0, first.stderr
    again = run("register", str(path), "--json")
    assert json.loads(again.stdout)["hash"] == json.loads(first.stdout)["hash"]
    # then sagas start from it by name
    started = run("start", "weekend_trip", "--input", json.dumps(TRIP), "--json")
    assert started.returncode == 0 and json.loads(started.stdout)["definition"] == "weekend_trip"
    # and the same name and version with other content is a conflict, not an overwrite
    path.write_text(yaml.safe_dump({**spec, "description": "changed"}), encoding="utf-8")
    changed = run("register", str(path), "--json")
    assert changed.returncode == 5 and json.loads(changed.stdout)["error"] == "DefinitionConflict"


def test_register_refuses_bad_files_with_named_exit_codes(run, tmp_path):
    missing = run("register", str(tmp_path / "nope.yaml"), "--json")
    assert missing.returncode == 4 and json.loads(missing.stdout)["error"] == "NotFound"
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json", encoding="utf-8")
    assert run("register", str(garbled)).returncode == 3
    unknown_tool = tmp_path / "rogue.json"
    unknown_tool.write_text(json.dumps({
        "name": "rogue", "version": 1,
        "steps": [{"id": "wipe", "tool": "shell.exec", "semantics": "irreversible"}],
    }), encoding="utf-8")
    refused = run("register", str(unknown_tool), "--json")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "shell.exec" in refused.stdout and "Traceback" not in refused.stderr


READ_COMMANDS = [
    ["status", "00000000-0000-0000-0000-000000000000"],
    ["list"],
    ["queue"],
    ["audit", "00000000-0000-0000-0000-000000000000"],
    ["stats"],
    ["alerts"],
    ["verify"],
    ["projections", "status"],
    ["find", "some-key"],
    ["dead-letters"],
    ["dead-letters", "show", "1"],
]


def test_read_commands_on_a_database_never_migrated_say_to_migrate_and_change_nothing(
    fresh_database, tmp_path
):
    # given a database nobody migrated, and no broker configured (the embedded one would start
    # under SAGAFLEET_HOME if anything asked for it)
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database, "SAGAFLEET_HOME": str(tmp_path)}
    env.pop("SAGAFLEET_BROKER_URL", None)
    # when every read command runs against it
    procs = [subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", *argv, "--json"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for argv in READ_COMMANDS]
    for argv, proc in zip(READ_COMMANDS, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        # then each stops with a typed error that says what to run
        assert proc.returncode == ExitCode.USAGE, (argv, out, err)
        doc = json.loads(out)
        assert doc["error"] == "DatabaseNotMigrated", (argv, doc)
        assert "sagafleet db migrate" in doc["message"] and "Traceback" not in err
    # and none of them migrated the database or started a broker
    with psycopg.connect(fresh_database) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog',"
            " 'information_schema')").fetchone()
    assert tables == (0,)
    assert not (tmp_path / "redis").exists()


def test_read_commands_register_nothing_and_need_no_broker(run, fresh_database, tmp_path):
    # given a migrated database where nothing was ever started, and no broker configured
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database, "SAGAFLEET_HOME": str(tmp_path),
           # (an operator too: dead letters show only to a role allowing them)
           "SAGAFLEET_TOKEN": issue_token(fresh_database, "reader", ["auditor", "operator"])}
    env.pop("SAGAFLEET_BROKER_URL", None)
    # when the read commands run
    for argv in READ_COMMANDS:
        result = subprocess.run([sys.executable, "-m", "sagafleet", *argv, "--json"],  # noqa: S603
                                env=env, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode in (ExitCode.OK, ExitCode.NOT_FOUND), (argv, result.stderr)
    # then no definition was registered as a side effect, and no broker was started
    with psycopg.connect(fresh_database) as conn:
        assert conn.execute("SELECT count(*) FROM eventstore.definitions").fetchone() == (0,)
    assert not (tmp_path / "redis").exists()


def test_resolving_a_saga_that_waits_for_nobody_is_a_named_conflict(run):
    # given a running saga, not paused for a person
    doc = json.loads(run("start", "trip", "--input", json.dumps(TRIP), "--key", "rs",
                         "--json").stdout)
    # when an operator tries to resolve it
    result = run("resolve", doc["saga_id"], "resume", "--reason", "why", "--json")
    # then nothing is recorded and the command says why, with the conflict exit code
    assert result.returncode == ExitCode.CONFLICT, result.stdout + result.stderr
    refused = json.loads(result.stdout)
    assert refused["error"] == "NothingToResolve" and "not waiting for an operator" in (
        refused["message"])
    status = json.loads(run("status", doc["saga_id"], "--json").stdout)
    assert status["version"] == doc["version"]


def test_input_comes_from_a_file_or_stdin_and_find_returns_the_saga_by_key(
    run, fresh_database, broker_url, tmp_path
):
    # given the trip input in a file, and the same input on stdin under another key
    path = tmp_path / "trip.json"
    path.write_text(json.dumps(TRIP), encoding="utf-8")
    from_file = run("start", "trip", "--input", f"@{path}", "--key", "from-file", "--json")
    assert from_file.returncode == 0, from_file.stderr
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url,
           # another agent of the tenant (a second token of "cli" would rotate the first)
           "SAGAFLEET_TOKEN": issue_token(fresh_database, "cli-stdin", ("agent",))}
    from_stdin = subprocess.run(
        [sys.executable, "-m", "sagafleet", "start", "trip", "--input", "-", "--key",
         "from-stdin", "--json"], input=json.dumps(TRIP), env=env, capture_output=True,
        text=True, timeout=120, check=False)
    assert from_stdin.returncode == 0, from_stdin.stderr
    # when each is looked up by its key
    found = json.loads(run("find", "from-file", "--json").stdout)
    also = json.loads(run("find", "from-stdin", "--json").stdout)
    # then each key names its own saga, and an unknown key (or another tenant's) is not found
    assert found["saga_id"] == json.loads(from_file.stdout)["saga_id"]
    assert also["saga_id"] == json.loads(from_stdin.stdout)["saga_id"] != found["saga_id"]
    assert run("find", "no-such-key", "--json").returncode == ExitCode.NOT_FOUND
    other = issue_token(fresh_database, "reader", ["auditor"], tenant="other")
    assert run("find", "from-file", "--json", token=other).returncode == ExitCode.NOT_FOUND
    # and an unreadable file or a non-JSON one is a typed error, not a traceback
    missing = run("start", "trip", "--input", f"@{tmp_path / 'nope.json'}", "--json")
    assert missing.returncode == ExitCode.NOT_FOUND and "Traceback" not in missing.stderr
    path.write_text("{not json", encoding="utf-8")
    broken = run("start", "trip", "--input", f"@{path}", "--json")
    assert broken.returncode == ExitCode.INVALID_INPUT and "is not JSON" in broken.stdout


def test_a_definition_with_nested_input_is_registered_and_its_input_checked_by_path(
    run, tmp_path
):
    # given the trip with a nested traveller and a list of passengers, as a YAML file
    spec = trip_definition().model_dump(mode="json") | {"name": "group_trip"}
    spec.pop("tools")
    spec["input"] |= {
        "traveller": {"type": "object", "properties": {
            "name": {"type": "string", "min_length": 1},
            "email": {"type": "string", "format": "email"}}},
        "passengers": {"type": "array", "max_length": 4, "items": {
            "type": "object", "properties": {
                "ticket": {"type": "string", "pattern": "^TK[0-9]{6}$"}}}},
    }
    path = tmp_path / "group_trip.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert run("register", str(path), "--json").returncode == 0
    good = {**TRIP, "traveller": {"name": "Ada", "email": "ada@example.com"},
            "passengers": [{"ticket": "TK000001"}]}
    # when a start breaks rules deep inside the input
    bad = {**good, "traveller": {"email": "ada"}, "passengers": [{"ticket": "TK1"}]}
    refused = run("start", "group_trip", "--input", json.dumps(bad), "--json")
    # then every problem is named by its path and rule, with exit 3, and nothing started
    assert refused.returncode == ExitCode.INVALID_INPUT, refused.stdout + refused.stderr
    message = json.loads(refused.stdout)["message"]
    for expected in ("input.traveller.name: [missing]", "input.traveller.email: [invalid_format]",
                     "input.passengers[0].ticket: [pattern_mismatch]"):
        assert expected in message
    started = run("start", "group_trip", "--input", json.dumps(good), "--json")
    assert started.returncode == 0, started.stdout + started.stderr
    # and a definition whose pattern cannot compile is refused when registered, naming it
    spec["name"] = "broken_trip"
    spec["input"]["traveller"]["properties"]["email"] = {"type": "string", "pattern": "(TK"}
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    broken = run("register", str(path), "--json")
    assert broken.returncode == ExitCode.INVALID_INPUT
    assert "input.traveller.email: [invalid_pattern]" in json.loads(broken.stdout)["message"]
