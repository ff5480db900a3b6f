"""A worker killed right after it took a message from Redis loses nothing.

kombu's own Redis transport takes with BRPOP and records the message as unacknowledged a
moment later: killed in between, the message is gone (the first test shows it, so that the
second means something). The fleet's transport (workers.reliable_redis) takes and records
in one Lua script: the message waits in kombu's unacked hash, comes back after the
visibility timeout and acts once. The kill point is exact: the consumer stops itself as the
taken message is handed over (stop_after_take.py), and the test kills it while stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import redis
from celery import Celery
from fleet_harness import redis_client
from kombu import Connection, Consumer, Exchange, Producer, Queue
from signed_agent import agent_signer, send
from trip_inputs import by_secret_ref

from workers.celery_app import (
    QUEUE_COMMANDS,
    QUEUE_STEPS,
    STEP_TASK,
    BrokerSettings,
    create_celery_app,
)
from workers.reliable_redis import Channel, ReliableConnection

STOP_AFTER_TAKE = Path(__file__).with_name("stop_after_take.py")


def _agent(broker: str) -> Celery:
    app = Celery("agent", broker=broker, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


def _killed_right_after_the_take(broker: str, kind: str) -> None:
    """Start a consumer of the commands queue on ``kind``'s transport, wait until it has
    taken a message and stopped, SIGKILL it."""
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, str(STOP_AFTER_TAKE), broker, kind, QUEUE_COMMANDS],
        env=env, stderr=subprocess.PIPE)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        pytest.fail(f"the consumer exited before taking anything: "
                    f"{proc.stderr.read().decode() if proc.stderr else ''}")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _queued(client: redis.Redis, queue: str) -> int:
    return sum(int(client.llen(key)) for key in client.scan_iter(f"{queue}*")
               if client.type(key) == b"list")


def _unacked_tasks(client: redis.Redis) -> list[str]:
    """Celery task ids of the messages in kombu's unacked hash."""
    return [json.loads(value)[0]["headers"]["id"] for value in client.hvals("unacked")]


def test_kombus_own_transport_loses_a_message_taken_by_a_worker_killed_at_once(
    fleet, broker
):
    # given a command waiting in the commands queue
    agent = _agent(broker)
    signer = agent_signer(fleet, "lost")
    task_id = send(agent, signer.start_saga("trip", by_secret_ref(fleet.client(tenant="lost")),
                                            key="lost-1"))
    client = redis_client(broker)
    assert _queued(client, QUEUE_COMMANDS) == 1
    # when a consumer on kombu's own Redis transport is killed right after taking it
    _killed_right_after_the_take(broker, "kombu")
    # then the command is neither queued nor recorded as unacknowledged: nothing can bring
    # it back (the gap the fleet's transport closes)
    assert _queued(client, QUEUE_COMMANDS) == 0
    assert task_id not in _unacked_tasks(client)


def test_a_command_taken_by_a_worker_killed_at_once_comes_back_and_acts_once(
    fleet, database, broker, workers
):
    # given a command waiting in the commands queue
    agent = _agent(broker)
    tenant = "taken"
    signer = agent_signer(fleet, tenant)
    task_id = send(agent, signer.start_saga("trip", by_secret_ref(fleet.client(tenant=tenant)),
                                            key="taken-1"))
    client = redis_client(broker)
    # when a consumer on the fleet's transport is killed right after taking it
    _killed_right_after_the_take(broker, "reliable")
    # then it is no longer queued, but recorded as unacknowledged under its delivery tag
    assert _queued(client, QUEUE_COMMANDS) == 0
    assert _unacked_tasks(client) == [task_id]
    assert client.zcard("unacked_index") == 1
    # and when a worker whose unacknowledged messages come back after 3 s comes up
    workers.start(1, extra_env={"SAGAFLEET_VISIBILITY_TIMEOUT_SECONDS": "3"})
    # then the command starts its saga, once, and is acknowledged
    deadline = time.monotonic() + 90
    while fleet.client(tenant=tenant).find("taken-1") is None or client.hlen("unacked"):
        assert time.monotonic() < deadline, "the taken command never came back and acted"
        time.sleep(0.1)
    with psycopg.connect(database) as conn:
        row = conn.execute("SELECT count(*) FROM eventstore.events WHERE event_type ="
                           " 'SagaStarted' AND tenant_id = %s", (tenant,)).fetchone()
    assert row is not None and row[0] == 1


def _consumed_order(connection: Connection, queues: list[Queue]) -> list[str]:
    """Bodies of everything in ``queues``, in the order ``connection`` hands them over."""
    taken: list[str] = []

    def take(body: str, message: object) -> None:
        taken.append(body)
        message.ack()  # type: ignore[attr-defined]

    with connection, Consumer(connection.channel(), queues, callbacks=[take]):
        while True:
            try:
                connection.drain_events(timeout=1.5)
            except TimeoutError:
                return taken


def _publish_mix(broker: str, queues: list[Queue]) -> None:
    with Connection(broker) as connection:
        producer = Producer(connection.channel())
        for n in range(4):
            for queue in queues:
                producer.publish(f"{queue.name}-{n}", exchange=queue.exchange,
                                 routing_key=queue.routing_key, declare=[queue])
        # a message of another priority (kombu: a lower number comes first)
        producer.publish("urgent", exchange=queues[1].exchange,
                         routing_key=queues[1].routing_key, priority=0)
        producer.publish("later", exchange=queues[0].exchange,
                         routing_key=queues[0].routing_key, priority=9)


def test_the_atomic_take_hands_messages_over_in_kombus_order(broker):
    # given two queues holding messages of two priorities
    queues = [Queue(name, Exchange(name), name) for name in ("order.a", "order.b")]
    # when kombu's own transport consumes them, and the fleet's consumes the same again
    _publish_mix(broker, queues)
    by_kombu = _consumed_order(Connection(broker), queues)
    _publish_mix(broker, queues)
    by_fleet = _consumed_order(ReliableConnection(broker), queues)
    # then both hand them over in the same order (priorities, then the queues in turn),
    # and every message was acknowledged
    assert by_fleet == by_kombu and len(by_kombu) == 10
    client = redis_client(broker)
    assert client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0


def test_the_producer_pool_publishes_through_the_fleets_transport_on_one_client(broker):
    # given the fleet's Celery app, publishing as a client or worker does: from its pool
    app = create_celery_app(BrokerSettings(broker_url=broker))
    client = redis_client(broker)
    client.delete(QUEUE_STEPS)
    with app.producer_or_acquire() as producer:
        channel = producer.channel
        # then its pooled connections use the fleet's transport (kombu's pool would not)
        assert isinstance(channel, Channel)
        assert producer.connection.as_uri() == app.connection_for_write().as_uri()
        # and every synchronous command shares one Redis client on the channel's pool
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second and first.connection_pool is channel.pool
        # which follows the pool when kombu replaces it (after a fork, on reconnect)
        channel._disconnect_pools()
        with channel.conn_or_acquire() as third:
            assert third is not first and third.connection_pool is channel.pool
        # and what it publishes arrives
        for attempt in range(3):
            app.send_task(STEP_TASK, args=["s", "hold", "forward", attempt], queue=QUEUE_STEPS,
                          producer=producer)
    assert _queued(client, QUEUE_STEPS) == 3
    client.delete(QUEUE_STEPS)
