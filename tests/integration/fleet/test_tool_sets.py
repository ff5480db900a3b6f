"""A deployment's own tools: ``sagafleet worker --tools MODULE:ATTR`` runs them, allowlisted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from fleet_harness import LEASE_S, QUEUE_WAIT_S, worker_env
from principal_support import authenticated

from saga_core.contracts import SagaStatus
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from sagafleet.exit_codes import ExitCode
from sagafleet.processes import spawn_sagafleet, stop_processes
from sagafleet.settings import ConfigurationError, Settings
from workers.fleet import Fleet, FleetConfig
from workers.tools import ToolSetError, load_tool_set

TOOLSETS = Path(__file__).parent / "toolsets"
sys.path.insert(0, str(TOOLSETS))

import notes_tools  # noqa: E402  (found through TOOLSETS, as the worker finds it)

from sagafleet.example_sagas.registration import register_trip  # noqa: E402


def test_a_worker_runs_the_tool_set_it_is_given(database, broker, tmp_path, wait_settled):
    # given the user's notes tools and a saga definition that uses them
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(notes_tools.TABLE)
    fleet = Fleet(FleetConfig(database_url=database, broker_url=broker, lease_s=LEASE_S,
                              queue_wait_s=QUEUE_WAIT_S), notes_tools.tool_set())
    env = {**worker_env(database, broker),
           "PYTHONPATH": os.pathsep.join([str(TOOLSETS), os.environ.get("PYTHONPATH", "")])}
    worker = spawn_sagafleet(["worker", "--tools", "notes_tools:tool_set"], env,
                             tmp_path / "worker.log")
    try:
        client = fleet.client()
        fleet.client_for(authenticated(fleet, "admin", ["admin"])).register_definition(
            notes_tools.DEFINITION)
        # when an agent starts a saga over them (twice, with the same key)
        saga = client.start("note", {"text": "hello"}, key="n-1")
        again = client.start("note", {"text": "hello"}, key="n-1")
        # then the worker ran the user's tool exactly once, under the step's operation key
        assert again.saga_id == saga.saga_id
        assert wait_settled(saga.saga_id, sweep=False) is SagaStatus.COMPLETED
        run = fleet.repo.load(saga.saga_id).state.forward["write"]
        with psycopg.connect(database) as conn:
            rows = conn.execute("SELECT key, text FROM test_notes").fetchall()
        assert rows == [(run.operation_key, "hello")]
        assert run.receipt is not None and run.receipt.get("text") == "hello"
    finally:
        stop_processes([worker])
        fleet.close()


def test_the_trip_is_not_registered_by_a_fleet_without_its_tools(database, broker):
    fleet = Fleet(FleetConfig(database_url=database, broker_url=broker), notes_tools.tool_set())
    try:
        assert register_trip(fleet) == []
    finally:
        fleet.close()


@pytest.mark.parametrize(("reference", "says"), [
    ("notes_tools", "must look like 'package.module:attribute'"),
    ("no_such_module_anywhere:tool_set", "cannot import no_such_module_anywhere"),
    ("notes_tools:missing", "has no 'missing'"),
    ("notes_tools:NOT_A_TOOL_SET", "gave a int, not a workers.tools.ToolSet"),
])
def test_a_bad_tool_set_reference_is_a_typed_error_naming_it(reference, says):
    with pytest.raises(ToolSetError, match=says):
        load_tool_set(reference)


def test_a_malformed_sagafleet_tools_variable_is_refused_by_name():
    with pytest.raises(ConfigurationError, match="SAGAFLEET_TOOLS"):
        Settings.from_env({"SAGAFLEET_TOOLS": "rm -rf /"})
    assert Settings.from_env({"SAGAFLEET_TOOLS": "pkg.mod:tools"}).tools == "pkg.mod:tools"


def test_a_worker_without_a_tool_set_refuses_to_start_and_says_how_to_give_one(tmp_path):
    # given no SAGAFLEET_TOOLS and no --tools (and no servers: it must not get that far)
    env = {k: v for k, v in os.environ.items() if k != "SAGAFLEET_TOOLS"}
    env["SAGAFLEET_HOME"] = str(tmp_path / "home")
    # when a worker is started
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", "worker"], env=env, capture_output=True, text=True,
        timeout=120, check=False)
    # then it exits with the usage code and one line naming both ways to give a tool set
    assert done.returncode == ExitCode.USAGE
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--tools" in lines[0] and "SAGAFLEET_TOOLS" in lines[0]
    assert "sagafleet.sandbox:trip_tool_set" in lines[0]
    assert not (tmp_path / "home").exists()  # no embedded server was started for nothing


def test_a_worker_on_a_mismatched_tool_set_refuses_to_start_naming_the_tools(
    database, broker, tmp_path
):
    # given a tool set whose catalogue lists a tool nobody implements
    env = {**worker_env(database, broker), "SAGAFLEET_TOOLS": "notes_tools:HALF_A_TOOL_SET",
           "PYTHONPATH": os.pathsep.join([str(TOOLSETS), os.environ.get("PYTHONPATH", "")])}
    # when a worker is started on it
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", "worker"], env=env, capture_output=True, text=True,
        timeout=120, check=False)
    # then it does not start, and says which tool lacks an implementation
    assert done.returncode != ExitCode.OK
    assert "notes.erase@1" in done.stderr and "Traceback" not in done.stderr


def test_every_fleet_that_can_run_the_trip_registers_the_same_trip(fleet, database, broker):
    # given the test fleet on the sandbox's tools (its catalogue has a short commit horizon)
    (on_sandbox,) = register_trip(fleet)
    # when a fleet with only the shipped catalogue (a command line) registers it too
    cli = Fleet(FleetConfig(database_url=database, broker_url=broker), trip_tool_catalogue())
    try:
        (on_cli,) = register_trip(cli)
    finally:
        cli.close()
    # then both stored the same content, bound to the shipped trip catalogue
    assert on_cli == on_sandbox == trip_definition().content_hash()
