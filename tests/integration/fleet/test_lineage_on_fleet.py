"""Lineage on a real fleet (issue 19 part 1): the Python client, a signed Celery
start_saga or submit_plan run by a real worker, and the CLI's audit and find --trace over
PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psycopg
import pytest
from principal_support import issue_token
from signed_agent import agent_signer, bare_celery
from trip_inputs import TRIP_INPUT

from events.saga_log.streams import saga_stream
from saga_core.contracts import SagaStatus
from saga_core.engine.events import SagaStarted
from sagafleet.exit_codes import ExitCode

pytestmark = pytest.mark.integration

TRACE = "0af7651916cd43dd8448eb211c80319c"
ASKED = {"agent_request_id": "req-celery-1", "model_name": "claude-opus",
         "model_version": "4.5", "prompt_version": "travel-policy@3", "trace_id": TRACE}


def _metadata(database: str, saga_id: str) -> list[dict]:
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT metadata FROM eventstore.events WHERE stream_id = %s "
                            "ORDER BY stream_version", (saga_stream(saga_id),)).fetchall()
    return [row[0] for row in rows]


def _cli(database: str, broker: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker,
           "SAGAFLEET_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env,  # noqa: S603
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_celery_start_records_lineage_and_the_trace_finds_every_event(
    fleet, database, broker, workers, wait_settled
):
    # given a worker and an agent that signs a start_saga carrying its lineage
    workers.start(1)
    signer = agent_signer(fleet, "acme", "travel-agent")
    ref = fleet.client(tenant="acme").put_secret(TRIP_INPUT["card_token"])
    send = bare_celery(broker)
    name, kwargs = signer.start_saga("trip", {**TRIP_INPUT, "card_token": ref.as_input()},
                                     key="lineage-1", reason="a trip", lineage=ASKED)
    send.send_task(name, queue="sagafleet.commands", kwargs=kwargs)
    client = fleet.client(tenant="acme")
    deadline = time.monotonic() + 30
    while (saga := client.find("lineage-1")) is None:
        assert time.monotonic() < deadline, "the start_saga task never ran"
        time.sleep(0.2)
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    # then SagaStarted records who and what asked, and every event carries the trace
    started = fleet.repo.load_history(saga.saga_id).events[0]
    assert isinstance(started, SagaStarted) and started.lineage is not None
    assert started.lineage.model_dump() == ASKED
    metadata = _metadata(database, saga.saga_id)
    assert len(metadata) > 8
    assert {m["saga_trace_id"] for m in metadata} == {TRACE}
    # and the store's trace read finds exactly those events, for acme only
    found = fleet.store.events_of_trace("acme", TRACE)
    assert [(r.stream_id, r.stream_version) for r in found] == [
        (saga_stream(saga.saga_id), v) for v in range(1, len(metadata) + 1)]
    assert fleet.store.events_of_trace("beta", TRACE) == []
    # and the command line shows it both ways, tenant-scoped
    acme = issue_token(database, "ada", ("auditor",), tenant="acme")
    beta = issue_token(database, "bob", ("auditor",), tenant="beta")
    audit = _cli(database, broker, acme, "audit", saga.saga_id, "--json")
    assert audit.returncode == ExitCode.OK, audit.stderr
    report = json.loads(audit.stdout)
    assert report["lineage"] == ASKED
    assert report["definition_hash"] == started.definition_hash
    assert {e["trace_id"] for e in report["timeline"]} == {TRACE}
    text = _cli(database, broker, acme, "audit", saga.saga_id).stdout
    assert "model_name=claude-opus" in text and "prompt_version=travel-policy@3" in text
    traced = _cli(database, broker, acme, "find", "--trace", TRACE, "--json")
    assert traced.returncode == ExitCode.OK, traced.stderr
    trace = json.loads(traced.stdout)
    assert [s["saga_id"] for s in trace["sagas"]] == [saga.saga_id]
    assert trace["sagas"][0]["lineage"]["agent_request_id"] == "req-celery-1"
    assert trace["sagas"][0]["input"]["card_token"] != TRIP_INPUT["card_token"]  # masked
    assert len(trace["events"]) == len(metadata) and not trace["truncated"]
    hidden = _cli(database, broker, beta, "find", "--trace", TRACE)
    assert hidden.returncode == ExitCode.NOT_FOUND
    bad = _cli(database, broker, acme, "find", "--trace", "not-a-trace")
    assert bad.returncode == ExitCode.USAGE and "--trace must be 32" in bad.stderr


def test_a_celery_start_with_a_malformed_lineage_is_dead_lettered_naming_it(
    fleet, database, broker, workers
):
    workers.start(1)
    signer = agent_signer(fleet, "acme", "travel-agent")
    name, kwargs = signer.start_saga("trip", TRIP_INPUT, key="bad-lineage",
                                     lineage={"trace_id": "nope", "model": "x"})
    bare_celery(broker).send_task(name, queue="sagafleet.commands", kwargs=kwargs)
    deadline = time.monotonic() + 30
    while True:
        with psycopg.connect(database) as conn:
            letters = conn.execute("SELECT reason FROM fleet.dead_letters").fetchall()
        if letters:
            break
        assert time.monotonic() < deadline, "the malformed start was never dead-lettered"
        time.sleep(0.2)
    reason = letters[0][0]
    assert "trace_id must be 32 lowercase hex" in reason and "unknown field 'model'" in reason
    assert fleet.client(tenant="acme").find("bad-lineage") is None


ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}
PLAN_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _dead_letters(database: str) -> list[str]:
    deadline = time.monotonic() + 30
    while True:
        with psycopg.connect(database) as conn:
            letters = conn.execute("SELECT reason FROM fleet.dead_letters").fetchall()
        if letters:
            return [row[0] for row in letters]
        assert time.monotonic() < deadline, "the command was never dead-lettered"
        time.sleep(0.2)


def test_a_plan_started_over_celery_records_lineage_and_the_trace_finds_it(
    fleet, database, broker, workers, wait_settled
):
    # given a worker and an agent that signs a submit_plan with an input and its lineage
    workers.start(1)
    signer = agent_signer(fleet, "acme", "travel-agent")
    asked = {**ASKED, "agent_request_id": "req-plan-1", "trace_id": PLAN_TRACE}
    name, kwargs = signer.submit_plan(ROOM_PLAN, input={}, key="plan-lineage-1",
                                      reason="a room", lineage=asked)
    bare_celery(broker).send_task(name, queue="sagafleet.commands", kwargs=kwargs)
    client = fleet.client(tenant="acme")
    deadline = time.monotonic() + 30
    while (saga := client.find("plan-lineage-1")) is None:
        assert time.monotonic() < deadline, "the submit_plan task never started its saga"
        time.sleep(0.2)
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    # then the plan's SagaStarted records the lineage, and every event carries the trace
    started = fleet.repo.load_history(saga.saga_id).events[0]
    assert isinstance(started, SagaStarted) and started.lineage is not None
    assert started.definition_name.startswith("agent-plan-")
    assert started.lineage.model_dump() == asked
    metadata = _metadata(database, saga.saga_id)
    assert {m["saga_trace_id"] for m in metadata} == {PLAN_TRACE}
    # and the trace finds the saga's events, in the store and on the command line
    found = fleet.store.events_of_trace("acme", PLAN_TRACE)
    assert [(r.stream_id, r.stream_version) for r in found] == [
        (saga_stream(saga.saga_id), v) for v in range(1, len(metadata) + 1)]
    acme = issue_token(database, "ada", ("auditor",), tenant="acme")
    traced = _cli(database, broker, acme, "find", "--trace", PLAN_TRACE, "--json")
    assert traced.returncode == ExitCode.OK, traced.stderr
    trace = json.loads(traced.stdout)
    assert [s["saga_id"] for s in trace["sagas"]] == [saga.saga_id]
    assert trace["sagas"][0]["lineage"]["agent_request_id"] == "req-plan-1"


def test_a_plan_with_a_malformed_lineage_is_dead_lettered_and_registers_nothing(
    fleet, database, broker, workers
):
    workers.start(1)
    signer = agent_signer(fleet, "acme", "travel-agent")
    name, kwargs = signer.submit_plan(ROOM_PLAN, input={}, key="bad-plan-lineage",
                                      lineage={"model_version": 4, "trace_id": "0" * 32})
    bare_celery(broker).send_task(name, queue="sagafleet.commands", kwargs=kwargs)
    [reason] = _dead_letters(database)
    assert "lineage" in reason and "model_version" in reason and "trace_id" in reason
    assert fleet.client(tenant="acme").find("bad-plan-lineage") is None
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT 1 FROM eventstore.definitions"
                            " WHERE name LIKE 'agent-plan-%%'").fetchall() == []


def test_a_signer_refuses_a_plan_lineage_without_an_input(fleet):
    signer = agent_signer(fleet, "acme", "travel-agent")
    with pytest.raises(ValueError, match="lineage is recorded on a saga start"):
        signer.submit_plan(ROOM_PLAN, lineage={"model_name": "m"})


def test_the_python_client_records_lineage_and_an_otel_free_start_gets_a_trace(fleet, database):
    client = fleet.client(tenant="acme")
    saga = client.start("trip", TRIP_INPUT, key="py-1",
                        lineage={"agent_request_id": "r-py", "model_name": "m"})
    started = fleet.repo.load_history(saga.saga_id).events[0]
    assert isinstance(started, SagaStarted) and started.lineage is not None
    trace = started.lineage.trace_id
    assert trace is not None and len(trace) == 32 and started.lineage.agent_request_id == "r-py"
    assert [m["saga_trace_id"] for m in _metadata(database, saga.saga_id)] == [trace] * len(
        _metadata(database, saga.saga_id))
    assert [r.stream_id for r in fleet.store.events_of_trace("acme", trace)][0] == saga_stream(
        saga.saga_id)


def test_the_trace_index_is_used(fleet, database):
    with psycopg.connect(database) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT * FROM eventstore.events WHERE tenant_id = 'acme' "
            "AND metadata ? 'saga_trace_id' AND metadata ->> 'saga_trace_id' = %s "
            "ORDER BY global_position", (TRACE,)).fetchall()
    assert "events_tenant_saga_trace_idx" in " ".join(row[0] for row in plan)
