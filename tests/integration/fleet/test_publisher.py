"""Publishing step commands on a real broker, and what a publish that fails leaves behind."""

from __future__ import annotations

import pytest

from workers.celery_app import QUEUE_STEPS, BrokerSettings, broker_redis, create_celery_app
from workers.messages import StepCommand
from workers.publisher import CeleryPublisher

pytestmark = pytest.mark.integration


def _commands() -> list[StepCommand]:
    return [StepCommand.parse([f"saga-{n}", "hold_flight", "forward", 1]) for n in range(3)]


def test_a_batch_is_sent_through_one_producer_as_step_messages(broker: str) -> None:
    # given a publisher on the real broker
    publisher = CeleryPublisher(create_celery_app(BrokerSettings(broker_url=broker)))
    # when three commands are published together
    sent = publisher.publish(_commands())
    # then all three wait on the steps queue, carrying only the command's four fields
    assert sent == 3 and publisher.failures == 0
    assert broker_redis(broker).llen(QUEUE_STEPS) == 3
    assert publisher.publish([]) == 0


def test_a_broker_that_is_down_fails_each_command_without_raising() -> None:
    # given a publisher whose broker refuses connections
    publisher = CeleryPublisher(
        create_celery_app(BrokerSettings(broker_url="redis://127.0.0.1:1/0"))
    )
    # when it publishes, then nothing is sent, each failure is counted, none escapes:
    # the commands are in the log, and the sweeper re-enqueues them
    assert publisher.publish(_commands()) == 0
    assert publisher.failures == 3


def test_a_batch_whose_send_fails_counts_none_as_sent(broker: str) -> None:
    # given a publisher on the real broker, whose steps queue key Redis refuses to push to
    publisher = CeleryPublisher(create_celery_app(BrokerSettings(broker_url=broker)))
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
