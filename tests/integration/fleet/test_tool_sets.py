"""A deployment's own tools: ``sagafleet worker --tools MODULE:ATTR`` runs them, allowlisted."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psycopg
import pytest
from fleet_harness import LEASE_S, QUEUE_WAIT_S, worker_env

from saga_core.contracts import SagaStatus
from sagafleet.processes import spawn_sagafleet, stop_processes
from sagafleet.settings import ConfigurationError, Settings
from workers.fleet import Fleet, FleetConfig
from workers.tools import ToolSetError, load_tool_set

TOOLSETS = Path(__file__).parent / "toolsets"
sys.path.insert(0, str(TOOLSETS))

import notes_tools  # noqa: E402  (found through TOOLSETS, as the worker finds it)


def test_a_worker_runs_the_tool_set_it_is_given(database, broker, tmp_path, wait_settled):
    # given the user's notes tools and a saga definition that uses them
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(notes_tools.TABLE)
    tools = notes_tools.tool_set()
    fleet = Fleet(FleetConfig(database_url=database, broker_url=broker, lease_s=LEASE_S,
                              queue_wait_s=QUEUE_WAIT_S), tools=tools.registry,
                  catalogue=tools.catalogue)
    env = {**worker_env(database, broker),
           "PYTHONPATH": os.pathsep.join([str(TOOLSETS), os.environ.get("PYTHONPATH", "")])}
    worker = spawn_sagafleet(["worker", "--tools", "notes_tools:tool_set"], env,
                             tmp_path / "worker.log")
    try:
        client = fleet.client()
        client.register_definition(notes_tools.DEFINITION)
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
    tools = notes_tools.tool_set()
    fleet = Fleet(FleetConfig(database_url=database, broker_url=broker), tools=tools.registry,
                  catalogue=tools.catalogue)
    try:
        assert fleet.register_builtin_definitions() == []
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
