"""A dry run on real servers: the command line, the in-process client and the MCP gateway's
tools show what a start would do and write nothing (every table's rows and every Redis key
counted before and after) and call nothing (the sandbox providers keep their books in
tables, counted too); the real start then runs on exactly the keys and requests shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
from fleet_harness import events_of, redis_client, settle
from principal_support import authenticated, issue_token
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import StepStarted
from sagafleet.example_sagas.registration import register_trip
from sagafleet.exit_codes import ExitCode
from sagafleet.gateway.function_schemas import FunctionRouter
from sagafleet.gateway.service import GatewayService

ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}


def _everything(database: str, broker: str) -> dict[str, Any]:
    """Rows of every table of every schema, and every Redis key with its type and size."""
    with psycopg.connect(database) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE'"
            " AND table_schema NOT IN ('pg_catalog', 'information_schema')").fetchall()
        counts: dict[str, Any] = {}
        for schema, table in tables:
            row = conn.execute(f'SELECT count(*) FROM "{schema}"."{table}"').fetchone()
            assert row is not None
            counts[f"{schema}.{table}"] = row[0]
    client = redis_client(broker)
    try:
        for key in client.keys("*"):
            kind = client.type(key)
            size = client.llen(key) if kind in (b"list", "list") else (
                client.hlen(key) if kind in (b"hash", "hash") else (
                    client.zcard(key) if kind in (b"zset", "zset") else (
                        client.scard(key) if kind in (b"set", "set") else 1)))
            counts[f"redis:{key!r}"] = (kind, size)
    finally:
        client.close()
    assert counts, "nothing counted"
    return counts


def _cli(database: str, broker: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker,
           "SAGAFLEET_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_dry_run_writes_nothing_calls_nothing_and_the_start_then_does_what_it_showed(
        fleet, database, broker, workers, tmp_path: Path):
    # given a migrated fleet with the trip registered, and an agent's token of tenant acme
    register_trip(fleet)
    token = issue_token(database, "planner", ["agent"], tenant="acme")
    agent = authenticated(fleet, "planner-2", ["agent"], tenant="acme")
    client = fleet.client_for(agent)
    data = tmp_path / "trip.json"
    data.write_text(json.dumps(TRIP_INPUT))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(ROOM_PLAN))
    before = _everything(database, broker)
    # when the trip is dry-run from the command line (JSON and text), in process, and
    # through the gateway's tools, and a plan is dry-run from the command line
    as_json = _cli(database, broker, token, "start", "trip", "--input", f"@{data}",
                   "--key", "dry-cli", "--dry-run", "--json")
    as_text = _cli(database, broker, token, "start", "trip", "--input", f"@{data}",
                   "--key", "dry-cli", "--dry-run")
    planned_plan = _cli(database, broker, token, "plan", str(plan), "--dry-run", "--json")
    in_process = client.dry_run("trip", TRIP_INPUT, key="dry-cli")
    gateway = GatewayService(fleet)
    by_tool = gateway.start_saga(agent, "trip", TRIP_INPUT, "dry-cli", "try it", dry_run=True)
    proposed = gateway.propose_plan(agent, ROOM_PLAN["actions"], "a room", dry_run=True)
    # then nothing was written anywhere, and no provider was called
    assert _everything(database, broker) == before
    assert as_json.returncode == ExitCode.OK, as_json.stderr
    shown = json.loads(as_json.stdout)
    assert shown["dry_run"] is True and shown["saga_id_final"] is True
    assert TRIP_INPUT["card_token"] not in as_json.stdout + as_text.stdout
    assert shown["order"] == [["hold_flight", "hold_hotel"], ["capture_payment"],
                              ["send_itinerary"]]
    assert "nothing was written" in as_text.stdout and "hold_flight" in as_text.stdout
    assert planned_plan.returncode == ExitCode.OK, planned_plan.stderr
    assert json.loads(planned_plan.stdout)["definition"].startswith("agent-plan-")
    assert proposed["dry_run"] and proposed["steps"][0]["compensation"]["tool"] == "hotels.release"
    # and every entry showed the same keys (the key fixes the saga id for the tenant)
    keys = {s["step_id"]: s["forward"]["operation_key"] for s in shown["steps"]}
    assert keys == {s.step_id: s.forward.operation_key for s in in_process.steps}
    assert keys == {s["step_id"]: s["forward"]["operation_key"] for s in by_tool["steps"]}
    # when the real start runs on real workers with the same key
    workers.start(1)
    saga = client.start("trip", TRIP_INPUT, key="dry-cli")
    assert settle(fleet, [saga.saga_id])[saga.saga_id] is SagaStatus.COMPLETED
    # (the providers' books, counted above, do see a real start's calls)
    after = _everything(database, broker)
    assert after["sandbox_flights.idempotency_keys"] > before["sandbox_flights.idempotency_keys"]
    # then it recorded the saga id, operation keys and request hashes the dry run showed
    assert saga.saga_id == shown["saga_id"]
    started = {e.step_id: e for e in events_of(fleet, saga.saga_id)
               if isinstance(e, StepStarted) and e.kind is StepKind.FORWARD}
    assert {s: e.operation_key for s, e in started.items()} == keys
    for step in in_process.steps:
        if step.forward.request_hash is not None:  # those not waiting for a receipt
            assert started[step.step_id].request_hash == step.forward.request_hash
    assert any(s.forward.request_hash for s in in_process.steps)


def test_a_dry_run_refuses_bad_input_with_the_start_s_typed_problems(fleet, database, broker):
    register_trip(fleet)
    token = issue_token(database, "planner", ["agent"], tenant="acme")
    bad = json.dumps({**TRIP_INPUT, "nights": "two"})
    before = _everything(database, broker)
    dry = _cli(database, broker, token, "start", "trip", "--input", bad, "--dry-run", "--json")
    assert _everything(database, broker) == before
    real = _cli(database, broker, token, "start", "trip", "--input", bad, "--json")
    assert dry.returncode == real.returncode == ExitCode.INVALID_INPUT
    assert json.loads(dry.stdout) == json.loads(real.stdout)
    assert "nights" in dry.stdout


def test_a_model_s_function_call_asking_for_a_dry_run_gets_one_and_a_non_boolean_is_refused(
        fleet, database, broker):
    # given the function-calling router over the gateway, as a trusted program runs it
    register_trip(fleet)
    agent = authenticated(fleet, "planner", ["agent"], tenant="acme")
    router = FunctionRouter(GatewayService(fleet))
    call = {"definition": "trip", "input": TRIP_INPUT, "idempotency_key": "fn-1",
            "reason": "try it"}
    before = _everything(database, broker)
    # when a model asks for a dry run, and another writes the flag as text
    shown = router.call(agent, "start_saga", {**call, "dry_run": True})
    refused = router.call(agent, "start_saga", {**call, "dry_run": "yes"})
    plan = router.call(agent, "propose_plan", {"steps": ROOM_PLAN["actions"], "dry_run": 1})
    # then the first is shown, the others refused naming the flag, and nothing was written
    assert shown["dry_run"] is True and shown["definition"] == "trip"
    for answer in (refused, plan):
        assert [p["where"] for p in answer["problems"]] == ["dry_run"], answer
    assert _everything(database, broker) == before
