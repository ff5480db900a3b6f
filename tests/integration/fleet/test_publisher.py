"""Publishing step commands on a real broker, and what a publish that fails leaves behind."""

from __future__ import annotations

import base64
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from celery import Celery
from celery.signals import before_task_publish

from application.messages import StepCommand
from application.publishing import Publisher
from workers.celery_app import QUEUE_STEPS, BrokerSettings, broker_redis, create_celery_app
from workers.publisher import CeleryPublisher, RedisStepPublisher, _stored_text

pytestmark = pytest.mark.integration

PUBLISHERS = [CeleryPublisher, RedisStepPublisher]
"""The plain path and the fleet's one-round-trip publisher: held to the same behaviour."""


def _commands() -> list[StepCommand]:
    return [StepCommand.parse([f"saga-{n}", "hold_flight", "forward", 1]) for n in range(3)]


@pytest.mark.parametrize("kind", PUBLISHERS)
def test_a_batch_is_sent_through_one_producer_as_step_messages(
        broker: str, kind: type[CeleryPublisher | RedisStepPublisher]) -> None:
    # given a publisher on the real broker
    publisher = kind(create_celery_app(BrokerSettings(broker_url=broker)))
    # when three commands are published together
    sent = publisher.publish(_commands())
    # then all three wait on the steps queue, carrying only the command's four fields
    assert sent == 3 and publisher.failures == 0
    assert broker_redis(broker).llen(QUEUE_STEPS) == 3
    assert publisher.publish([]) == 0


@pytest.mark.parametrize("kind", PUBLISHERS)
def test_a_broker_that_is_down_fails_each_command_without_raising(
        kind: type[CeleryPublisher | RedisStepPublisher]) -> None:
    # given a publisher whose broker refuses connections
    publisher = kind(create_celery_app(BrokerSettings(broker_url="redis://127.0.0.1:1/0")))
    # when it publishes, then nothing is sent, each failure is counted, none escapes:
    # the commands are in the log, and the sweeper re-enqueues them
    assert publisher.publish(_commands()) == 0
    assert publisher.failures == 3


@pytest.mark.parametrize("kind", PUBLISHERS)
def test_a_batch_whose_send_fails_counts_none_as_sent(
        broker: str, kind: type[CeleryPublisher | RedisStepPublisher]) -> None:
    # given a publisher on the real broker, whose steps queue key Redis refuses to push to
    publisher = kind(create_celery_app(BrokerSettings(broker_url=broker)))
    redis = broker_redis(broker)
    redis.delete(QUEUE_STEPS)
    redis.set(QUEUE_STEPS, "not a list")
    try:
        # when three commands are published together (one batch, sent when it ends)
        sent = publisher.publish(_commands())
    finally:
        redis.delete(QUEUE_STEPS)
    # then the batch's one send failed, so none counts as sent and each is a failure
    assert sent == 0 and publisher.failures == 3
    # and the next batch goes through whole
    assert publisher.publish(_commands()) == 3
    assert redis.llen(QUEUE_STEPS) == 3


def test_every_message_of_a_publish_has_ids_of_its_own(broker: str) -> None:
    # given the fleet's publisher on the real broker
    publisher = RedisStepPublisher(create_celery_app(BrokerSettings(broker_url=broker)))
    redis = broker_redis(broker)
    redis.delete(QUEUE_STEPS)
    # when it publishes three commands together, then again one
    assert publisher.publish(_commands()) == 3
    assert publisher.publish(_commands()[:1]) == 1
    stored = [json.loads(raw) for raw in redis.lrange(QUEUE_STEPS, 0, -1)]
    # then each message's task id and delivery tag are its own, and none repeats
    task_ids = [message["headers"]["id"] for message in stored]
    tags = [message["properties"]["delivery_tag"] for message in stored]
    assert [message["properties"]["correlation_id"] for message in stored] == task_ids
    assert len(set(task_ids + tags)) == 8


# -- the one-round-trip publisher writes what Celery writes ------------------------------------

_FRESH_EACH_MESSAGE = {("headers", "id"), ("headers", "root_id"),
                       ("properties", "correlation_id"), ("properties", "delivery_tag")}


def _stored(broker: str, app: Celery, publisher: Publisher) -> list[dict[str, Any]]:
    """The messages one publish of two commands leaves on the steps queue, oldest first,
    each decoded (its body too) and without what is new for every message (ids)."""
    redis = broker_redis(broker)
    redis.delete(QUEUE_STEPS)
    assert publisher.publish(_commands()[:2]) == 2
    found = []
    while (raw := redis.rpop(QUEUE_STEPS)) is not None:  # kombu takes from this end
        message = json.loads(raw)
        for part, name in _FRESH_EACH_MESSAGE:
            assert message[part].pop(name)
        message["body"] = json.loads(base64.b64decode(message["body"]))
        found.append(message)
    return found


def test_the_fleets_publisher_stores_the_messages_celery_stores(broker: str) -> None:
    # given the plain path and the fleet's publisher on one Celery app
    app = create_celery_app(BrokerSettings(broker_url=broker))
    # when each publishes the same two commands
    plain = _stored(broker, app, CeleryPublisher(app))
    fleets = _stored(broker, app, RedisStepPublisher(app))
    # then Redis holds the same messages in the same order, but for each message's own ids
    assert fleets == plain
    assert [m["body"][0] for m in fleets] == [c.as_args() for c in _commands()[:2]]


def test_later_publishes_built_from_the_threads_first_message_store_what_celery_stores(
        broker: str) -> None:
    # given the fleet's publisher that has published once on this thread (its template)
    app = create_celery_app(BrokerSettings(broker_url=broker))
    publisher = RedisStepPublisher(app)
    first = _stored(broker, app, publisher)
    # when it publishes again, and the plain path publishes the same commands
    again = _stored(broker, app, publisher)
    plain = _stored(broker, app, CeleryPublisher(app))
    # then the messages built from the template are the ones Celery builds
    assert again == first == plain


def test_a_message_written_into_its_templates_text_is_the_one_encoded_whole(
        broker: str) -> None:
    # given a message Celery built, as a root task's and as a child's (root id its own or
    # its parent's), and arguments that JSON and repr write with escapes
    publisher = RedisStepPublisher(create_celery_app(BrokerSettings(broker_url=broker)))
    first = publisher.message(_commands()[0])
    child = first.for_task("t-0", ["s"], "tag-0")
    child.headers["root_id"] = "parent-root"
    for template in (first, child):
        for args in (["saga-é\"\\", "step\u0000", "forward", 3], []):
            # when another message is made from it
            made = template.for_task(f"task-{len(args)}", args, f"tag-{len(args)}")
            # then its text is the one the whole message encodes to, byte for byte
            assert made.text == _stored_text(made.headers, made.properties, made.body)
            assert made.headers["root_id"] == (
                made.task_id if template is first else "parent-root")


def test_each_thread_and_each_forked_child_publishes_as_its_own(broker: str) -> None:
    # given the fleet's publisher that has published on this thread
    app = create_celery_app(BrokerSettings(broker_url=broker))
    publisher = RedisStepPublisher(app)
    command = _commands()[0]
    here = publisher.message(command)
    # when another thread publishes
    with ThreadPoolExecutor(1) as pool:
        there, their_oid = pool.submit(lambda: (publisher.message(command), app.thread_oid)
                                       ).result()
    # then its message answers to that thread, as Celery's would
    assert here.properties["reply_to"] == app.thread_oid
    assert there.properties["reply_to"] == their_oid != app.thread_oid
    # and a forked child's message names the child as its origin, not this process
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe and exits
        try:
            os.write(write, publisher.message(command).headers["origin"].encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        origin = pipe.read()
    os.waitpid(child, 0)
    assert origin.startswith(f"gen{child}@") and here.headers["origin"].startswith(
        f"gen{os.getpid()}@")


def test_a_listener_to_celerys_publishes_still_sees_every_step_message(broker: str) -> None:
    # given something listening to Celery's publishes (OpenTelemetry's instrumentation does)
    seen: list[str] = []

    def listen(sender: str | None = None, **_: Any) -> None:
        seen.append(str(sender))

    before_task_publish.connect(listen, weak=False)
    try:
        # when the fleet's publisher publishes
        publisher = RedisStepPublisher(create_celery_app(BrokerSettings(broker_url=broker)))
        broker_redis(broker).delete(QUEUE_STEPS)
        sent = publisher.publish(_commands())
    finally:
        before_task_publish.disconnect(listen)
    # then it went through Celery, which told the listener of each message
    assert sent == 3 and seen == ["sagafleet.step"] * 3
    assert broker_redis(broker).llen(QUEUE_STEPS) == 3
