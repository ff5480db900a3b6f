"""Agents enqueue signed saga commands as plain Celery tasks by name, with JSON arguments."""

from __future__ import annotations

import time

import psycopg
from celery import Celery
from signed_agent import agent_signer
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus


def _bare_celery(broker: str) -> Celery:
    # What an agent process in any language does: name the task, send JSON arguments.
    app = Celery("agent", broker=broker, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


def _dead_letters(database: str) -> list[tuple[str, str]]:
    with psycopg.connect(database) as conn:
        return conn.execute("SELECT task, reason FROM fleet.dead_letters ORDER BY id").fetchall()


def test_start_saga_task_by_name_runs_a_saga(fleet, database, broker, workers, wait_settled):
    # given a worker and an agent principal with a signing key and a bare Celery client
    workers.start(1)
    agent = _bare_celery(broker)
    signer = agent_signer(fleet, "acme", "travel-agent")
    # when it deposits its secret card token (a direct call: never through the broker)
    ref = fleet.client(tenant="acme").put_secret(TRIP_INPUT["card_token"])
    # and enqueues a signed sagafleet.commands.start_saga, the ref in the secret field
    name, kwargs = signer.start_saga("trip", {**TRIP_INPUT, "card_token": ref.as_input()},
                                     key="agent-1", reason="user asked for a trip")
    assert name == "sagafleet.commands.start_saga"
    agent.send_task(name, queue="sagafleet.commands", kwargs=kwargs)
    # then a saga with that key exists for the key's tenant and completes
    client = fleet.client(tenant="acme")
    deadline = time.monotonic() + 30
    while (saga := client.find("agent-1")) is None:
        assert time.monotonic() < deadline, "the start_saga task never ran"
        time.sleep(0.2)
    assert fleet.client(tenant="other").find("agent-1") is None  # keys are per tenant
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    started = fleet.repo.load_history(saga.saga_id).events[0]
    assert started.actor == "travel-agent" and started.reason == "user asked for a trip"


def test_malformed_messages_are_dead_lettered_and_the_fleet_keeps_going(
    fleet, database, broker, workers, wait_settled
):
    workers.start(1)
    agent = _bare_celery(broker)
    # given garbage on both queues
    agent.send_task("sagafleet.step", args=["not", "enough"], queue="sagafleet.steps")
    agent.send_task("sagafleet.step", args=["x", "y", "forward", "one"], queue="sagafleet.steps")
    signer = agent_signer(fleet)
    for signed in (signer.start_saga("trip", {"nights": "many"}),
                   signer.start_saga("no-such-saga", {})):
        agent.send_task(signed[0], queue="sagafleet.commands", kwargs=signed[1])
    # when a valid saga follows
    saga = fleet.client().start("trip", TRIP_INPUT, key="after-garbage")
    # then it still completes, and every bad message was kept with its reason
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    deadline = time.monotonic() + 10
    while len(_dead_letters(database)) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    letters = _dead_letters(database)
    assert len(letters) == 4
    reasons = " ".join(reason for _, reason in letters)
    assert "expected [saga_id" in reasons and "attempt must be an integer" in reasons
    assert "input.nights" in reasons and "no-such-saga" in reasons
