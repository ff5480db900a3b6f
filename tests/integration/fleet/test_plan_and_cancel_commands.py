"""``submit_plan`` and ``cancel_saga`` over Celery, on real workers, PostgreSQL and Redis: a
plan submitted with an input starts its saga, which completes; two different plans both
start; a plan may carry its own name and version; a cancel stops a running saga and
compensates it; and each of these delivered twice (the same message) acts once."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
from fleet_harness import events_of, settle
from signed_agent import agent_signer, bare_celery, send
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import CancelRequested, SagaStarted, StepSucceeded
from workers.fleet import Fleet
from workers.tasks import keyless_start_key

ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}
LONGER_ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 3, "guest_email": "a@b.c"}}]}


def _saga_by_key(fleet: Fleet, tenant: str, key: str, timeout: float = 120.0) -> str:
    client = fleet.client(tenant=tenant)
    deadline = time.monotonic() + timeout
    while (saga := client.find(key)) is None:
        assert time.monotonic() < deadline, f"no saga was started with key {key!r}"
        time.sleep(0.1)
    return saga.saga_id


def _rows(database: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(query, params).fetchall()


def _count(fleet: Fleet, saga_id: str, kind: type) -> int:
    return sum(isinstance(e, kind) for e in events_of(fleet, saga_id))


def test_a_plan_sent_twice_over_celery_starts_one_saga_that_completes(
        fleet, database, broker, workers):
    # given one worker and an agent with a signing key
    workers.start(1)
    signer = agent_signer(fleet, "plans")
    agent = bare_celery(broker)
    # when a plan with an input and a key is delivered twice (the same message)
    signed = signer.submit_plan(ROOM_PLAN, input={}, key="room-1", reason="a room for one")
    send(agent, signed, send(agent, signed))
    # then one saga was started for it, and it completes
    saga_id = _saga_by_key(fleet, "plans", "room-1")
    assert settle(fleet, [saga_id])[saga_id] is SagaStatus.COMPLETED
    assert _count(fleet, saga_id, SagaStarted) == 1
    started = events_of(fleet, saga_id)[0]
    assert isinstance(started, SagaStarted) and started.definition_name.startswith("agent-plan-")
    assert started.reason == "a room for one"
    # and its definition, named by the plan's content, was registered once
    assert _rows(database, "SELECT version FROM eventstore.definitions WHERE name = %s",
                 started.definition_name) == [(1,)]
    # and the hotel was held once
    assert _count(fleet, saga_id, StepSucceeded) == 1


def test_two_different_plans_over_celery_both_start_and_a_named_plan_keeps_its_name(
        fleet, database, broker, workers):
    workers.start(1)
    signer = agent_signer(fleet, "plans")
    agent = bare_celery(broker)
    # when two different plans without a name, and one with a name and version, are sent
    # with inputs (the first two without a key: each keyed by its own signed command)
    first = signer.submit_plan(ROOM_PLAN, input={})
    second = signer.submit_plan(LONGER_ROOM_PLAN, input={})
    named = signer.submit_plan(ROOM_PLAN, name="room-for-one", version=3, input={},
                               key="named")
    for signed in (first, second, named):
        send(agent, signed)
    keys = [keyless_start_key(signer.kid, json.loads(s[1]["envelope"])["command_id"])
            for s in (first, second)]
    saga_ids = [_saga_by_key(fleet, "plans", key) for key in [*keys, "named"]]
    # then all three started and completed, each on a definition of its own
    states = settle(fleet, saga_ids)
    assert set(states.values()) == {SagaStatus.COMPLETED}
    definitions = set()
    for saga_id in saga_ids:
        started = events_of(fleet, saga_id)[0]
        assert isinstance(started, SagaStarted)
        definitions.add((started.definition_name, started.definition_version))
    assert len(definitions) == 3 and ("room-for-one", 3) in definitions
    assert len(_rows(database, "SELECT 1 FROM eventstore.definitions"
                     " WHERE name LIKE 'agent-plan-%%'")) == 2
    # and nothing was dead-lettered
    assert _rows(database, "SELECT count(*) FROM fleet.dead_letters") == [(0,)]


def test_a_cancel_sent_twice_over_celery_is_recorded_once_and_compensates(
        fleet, database, broker, workers):
    # given a trip running on a real worker that holds flight and hotel, then waits for a
    # person to approve the capture (so it is still running when the cancel comes)
    workers.start(1)
    signer = agent_signer(fleet, "cancels")
    agent = bare_celery(broker)
    client = fleet.client(tenant="cancels")
    saga = client.start("trip", {**TRIP_INPUT, "amount": 250_000}, key="to-cancel")
    waited = client.wait(saga.saga_id, timeout=240)
    assert waited.settled and waited.saga.pending_approvals, waited.saga.status
    # when the agent's cancel is delivered twice (the same message)
    signed = signer.cancel_saga(saga.saga_id, reason="plans changed")
    send(agent, signed, send(agent, signed))
    # then the saga is compensated: both holds released, nothing captured
    assert settle(fleet, [saga.saga_id])[saga.saga_id] is SagaStatus.COMPENSATED
    events = events_of(fleet, saga.saga_id)
    undone = {e.step_id for e in events
              if isinstance(e, StepSucceeded) and e.kind is StepKind.COMPENSATION}
    assert undone == {"hold_flight", "hold_hotel"}
    assert not [e for e in events if isinstance(e, StepSucceeded)
                and e.step_id == "capture_payment"]
    # and the cancel was recorded once, as the agent's
    cancels = [e for e in events if isinstance(e, CancelRequested)]
    assert len(cancels) == 1 and cancels[0].reason == "plans changed"
    assert cancels[0].actor == "travel-agent"
    assert _rows(database, "SELECT count(*) FROM fleet.dead_letters") == [(0,)]


def test_a_plan_sent_with_an_input_it_refuses_is_dead_lettered_and_registers_nothing(
        fleet, database, broker, workers):
    workers.start(1)
    signer = agent_signer(fleet, "plans")
    agent = bare_celery(broker)
    # given a plan whose argument comes from the start's input
    plan = {"goal": "a room", "actions": [{"tool": "hotels.hold", "args": {
        "hotel_id": "${input.hotel}", "nights": 1, "guest_email": "a@b.c"}}]}
    # when it is sent with an input lacking that field
    send(agent, signer.submit_plan(plan, input={}, key="bad-input"))
    deadline = time.monotonic() + 120
    while not (letters := _rows(database, "SELECT reason FROM fleet.dead_letters")):
        assert time.monotonic() < deadline, "the command was never dead-lettered"
        time.sleep(0.1)
    # then it waits in the dead letters naming the missing field, and nothing was kept
    assert len(letters) == 1 and "hotel" in letters[0][0]
    assert _rows(database, "SELECT 1 FROM eventstore.definitions"
                 " WHERE name LIKE 'agent-plan-%%'") == []
    assert fleet.client(tenant="plans").find("bad-input") is None
