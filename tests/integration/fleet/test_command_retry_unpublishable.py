"""A command whose retry cannot be published is requeued, never dropped.

Celery's ``Task.retry`` turns a failed re-publish into ``Reject(requeue=False)``, which
drops the message; the command task must answer ``Reject(requeue=True)`` instead. The
broker here is a real address that refuses connections (a broker that is down); the
transient failure is the principal directory's, down while the command's key is looked up.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from celery.exceptions import Reject, Retry
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from application.command_signatures import VerifiedCommand
from events import StoreUnavailable
from sagafleet.agent import CommandSigner
from sagafleet.example_sagas import trip_tool_catalogue
from workers.fleet import Fleet, FleetConfig
from workers.tasks import START_SAGA, CommandMessage, run_command

DOWN = "redis://127.0.0.1:1/0"


class DirectoryDown:
    """The principal directory while its database is unreachable."""

    def signing_key(self, kid: str) -> None:
        raise StoreUnavailable("database unavailable: connection refused")


def _never_acts(fleet: Fleet, command: VerifiedCommand) -> None:
    raise AssertionError("a command whose key could not be looked up must not act")


def _fleet(broker_url: str) -> tuple[Fleet, dict[str, Any]]:
    fleet = Fleet(FleetConfig(database_url="postgresql://unused", broker_url=broker_url),
                  trip_tool_catalogue())
    fleet.principals = DirectoryDown()  # type: ignore[assignment]
    key = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    _, kwargs = CommandSigner("sk_" + "A" * 22, key).start_saga("trip", {})
    return fleet, kwargs


def test_a_retry_the_broker_cannot_take_requeues_the_command(broker_url: str) -> None:
    # given a command that fails for a transient reason, on a worker whose broker is down
    fleet, kwargs = _fleet(DOWN)
    task = fleet.celery.tasks[START_SAGA]
    task_id = str(uuid.uuid4())
    task.push_request(id=task_id, retries=0, args=[], kwargs=kwargs, delivery_info={},
                      called_directly=False, is_eager=False)
    try:
        # when it is handled
        with pytest.raises(Reject) as rejected:
            run_command(fleet, task, CommandMessage(START_SAGA, task_id, (), kwargs),
                        _never_acts)
    finally:
        task.pop_request()
        fleet.close()
    # then the message is handed back to the broker, not dropped
    assert rejected.value.requeue
    assert "StoreUnavailable" in str(rejected.value.reason)


def test_a_retry_the_broker_takes_is_published_for_later(broker_url: str) -> None:
    # given the same failure on a worker whose broker is up
    fleet, kwargs = _fleet(broker_url)
    task = fleet.celery.tasks[START_SAGA]
    task_id = str(uuid.uuid4())
    task.push_request(id=task_id, retries=2, args=[], kwargs=kwargs, delivery_info={},
                      called_directly=False, is_eager=False)
    try:
        with pytest.raises(Retry) as retried:
            run_command(fleet, task, CommandMessage(START_SAGA, task_id, (), kwargs),
                        _never_acts)
    finally:
        task.pop_request()
        fleet.close()
    # then a later copy of the same task id is in the broker, its countdown capped
    assert retried.value.sig is not None and retried.value.sig.id == task_id
    assert 0 <= float(retried.value.when) <= 4.0  # doubling from 1 s: at most 4 s at retry 3
