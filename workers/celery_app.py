"""The Celery application of the fleet, configured for safety rather than speed.

Redis is a wake-up channel, not a store: messages carry only identifiers, every
duplicate is made harmless by claims in the event store, and anything Redis loses is
re-enqueued by the sweeper from the log. So the settings aim at "never lose silently,
never deserialize anything but JSON, never retry in this layer".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import redis
from celery import Celery, Task
from celery.app.amqp import AMQP
from celery.utils.log import get_logger
from celery.worker.consumer import Consumer
from celery.worker.request import Request
from redis.sentinel import Sentinel

from saga_core.errors import ErrorKind, SagaError
from workers.reliable_redis import ReliableConnection

STEP_TASK = "sagafleet.step"
QUEUE_STEPS = "sagafleet.steps"
QUEUE_COMMANDS = "sagafleet.commands"

COMMAND_TASK_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType({
    # An agent's command exists only as its message until it takes effect, so the message
    # is acknowledged only after the outcome (the saga's events, or a dead letter) is
    # committed. A worker that dies mid-command leaves it unacknowledged: redelivered.
    "acks_late": True,
    "reject_on_worker_lost": True,
    # Never acknowledge a command that failed or timed out: the task itself turns every
    # failure into a retry or a dead letter (workers.tasks), so one that escapes is a
    # worker in trouble, and a timed-out command is requeued rather than dropped.
    "acks_on_failure_or_timeout": False,
    # Transient failures are retried for as long as they last (capped backoff in
    # workers.dead_letters.failures); only a command that can never succeed is dead-lettered.
    "max_retries": None,
    "ignore_result": True,
})
"""Celery task options of the ``sagafleet.commands.*`` tasks (see workers.tasks)."""


WITHHELD_ARGUMENTS = "'[withheld]'"
"""What Celery's log records say instead of a task's arguments."""


class ArgumentsWithheldRequest(Request):  # type: ignore[misc]
    """A task request whose argument reprs say ``'[withheld]'``.

    The sender of a message sets ``argsrepr``/``kwargsrepr`` (protocol 2; for protocol 1
    the worker makes them from the arguments), and Celery puts them in the ``extra`` data
    of its "received", "succeeded" and "raised" log records, where a structured log
    handler or an error tracker ships them. A saga command from an agent may hold a secret
    input (a raw value that is about to be refused), so no task of the fleet lets its
    arguments reach a log record; our own log lines name saga, step and reason instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._request_dict["argsrepr"] = self._request_dict["kwargsrepr"] = WITHHELD_ARGUMENTS
        self._argsrepr = self._kwargsrepr = WITHHELD_ARGUMENTS


class BodiesWithheldConsumer(Consumer):  # type: ignore[misc]
    """The worker's consumer, reporting a message it cannot run without what it carries.

    Celery logs the whole body and headers (``argsrepr``/``kwargsrepr`` included) of a
    message for an unknown task name, an invalid one, or one it cannot decode; an agent
    that misspells ``sagafleet.commands.start_saga`` may have put a secret in it. The
    reports keep the task name, id and reason; the message is dropped as before.
    """

    def on_unknown_message(self, body: Any, message: Any) -> None:
        super().on_unknown_message(WITHHELD_ARGUMENTS, _headers_withheld(message))

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        super().on_unknown_task(WITHHELD_ARGUMENTS, _headers_withheld(message), exc)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        super().on_invalid_task(WITHHELD_ARGUMENTS, _headers_withheld(message), exc)

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        get_logger(__name__).critical(
            "Can't decode message body: %r [type:%r encoding:%r]; body withheld",
            exc, message.content_type, message.content_encoding)
        message.ack()


def _headers_withheld(message: Any) -> Any:
    """``message`` with the argument reprs of its headers replaced (it is being dropped)."""
    headers = getattr(message, "headers", None)
    if isinstance(headers, dict):
        for name in ("argsrepr", "kwargsrepr"):
            if name in headers:
                headers[name] = WITHHELD_ARGUMENTS
    return message


class ReliableAMQP(AMQP):  # type: ignore[misc]
    """Celery's AMQP layer whose broker connections consume from Redis atomically: a
    message is taken and recorded as unacknowledged in one step (workers.reliable_redis),
    so a worker killed as it takes one leaves it to be redelivered, never lost."""

    Connection = ReliableConnection
    BrokerConnection = ReliableConnection


class FleetTask(Task):  # type: ignore[misc]
    """The base of the fleet's tasks: requests with their arguments withheld from logs."""

    Request = ArgumentsWithheldRequest


@dataclass(frozen=True)
class BrokerSettings:
    """What the Celery app needs to know: where the broker is and how long a step may run."""

    broker_url: str
    visibility_timeout_s: float = 600.0
    step_time_limit_s: float = 300.0
    # Workers answer Celery's remote control and send heartbeats, so that Celery's own
    # tools (inspect, events, Flower) see the fleet; off for a broker locked down to the
    # fleet's queues (SAGAFLEET_CELERY_REMOTE_CONTROL=false).
    remote_control: bool = True
    # Workers also send task events (received, started, succeeded: Flower's task pages,
    # `celery events`): three broadcasts a step, about a twentieth of a worker's CPU, for a
    # view the saga log already gives. Off unless asked (SAGAFLEET_CELERY_TASK_EVENTS=true),
    # and never without remote control (both go over the broker's pub/sub).
    task_events: bool = False
    # The name Redis Sentinel monitors the master under, for a sentinel://…;sentinel://… URL
    # (kombu's master_name transport option); None for any other broker URL.
    sentinel_master: str | None = None

    def __post_init__(self) -> None:
        if is_sentinel_url(self.broker_url) != (self.sentinel_master is not None):
            raise BrokerMisconfigured(SENTINEL_MISMATCH)

    @classmethod
    def for_visibility_timeout(cls, broker_url: str, visibility_timeout_s: float, *,
                               remote_control: bool = True, task_events: bool = False,
                               sentinel_master: str | None = None) -> BrokerSettings:
        """Settings whose step time limit fits inside ``visibility_timeout_s``: half of it,
        at most the default (a short timeout is for tests of redelivery after a kill)."""
        return cls(broker_url=broker_url, visibility_timeout_s=visibility_timeout_s,
                   step_time_limit_s=min(cls.step_time_limit_s, visibility_timeout_s / 2),
                   remote_control=remote_control, task_events=task_events,
                   sentinel_master=sentinel_master)

    @property
    def transport_options(self) -> dict[str, Any]:
        """kombu's broker transport options for these settings."""
        options: dict[str, Any] = {
            "visibility_timeout": self.visibility_timeout_s,
            # kombu scans only every interval x throttle seconds (100 s by default); one
            # scan per interval is a single ZRANGE on the unacked index.
            "unacked_restore_interval": self.unacked_restore_interval_s,
            "unacked_restore_throttle": 1,
            "socket_timeout": 30,
            "socket_connect_timeout": 10,
            "health_check_interval": 25,
        }
        if self.sentinel_master is not None:
            options["master_name"] = self.sentinel_master
        return options

    @property
    def unacked_restore_interval_s(self) -> float:
        """How often a worker looks for messages whose visibility timeout ran out (a killed
        worker's): often enough that they come back soon after it, never more than 10 s."""
        return max(0.5, min(10.0, self.visibility_timeout_s / 4))


SENTINEL_MISMATCH: Final = (
    "a sentinel://…;sentinel://… broker URL needs the name its Sentinels monitor the master "
    "under (SAGAFLEET_BROKER_SENTINEL_MASTER), and that name is for such a URL only")


class BrokerMisconfigured(SagaError):
    """The broker URL and its Sentinel master name do not go together (the message says
    which is missing; it never repeats the URL, which may hold a password)."""

    kind = ErrorKind.MISCONFIGURED


def is_sentinel_url(broker_url: str) -> bool:
    """Whether ``broker_url`` names Redis Sentinels (kombu's ``sentinel://`` transport)."""
    return broker_url.startswith("sentinel://")


def broker_redis(broker_url: str, sentinel_master: str | None = None,
                 **options: Any) -> redis.Redis:
    """A plain Redis client on a broker URL, including kombu's ``redis+socket://`` form and,
    with ``sentinel_master``, its ``sentinel://…;sentinel://…`` form (a client of whichever
    server the Sentinels name master, found again on every reconnection): for inspection,
    flushing in tests, counters in benchmarks, an agent's look at the broker's run id, and
    the step publisher. ``options``: more ``redis.Redis`` arguments (timeouts, retries)."""
    if is_sentinel_url(broker_url):
        if sentinel_master is None:
            raise BrokerMisconfigured(SENTINEL_MISMATCH)
        return _sentinel_master_client(broker_url, sentinel_master, **options)
    if broker_url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=broker_url.removeprefix("redis+socket://"),
                           **options)
    return redis.Redis.from_url(broker_url, **options)


def _sentinel_master_client(broker_url: str, master: str, **options: Any) -> redis.Redis:
    """The master's client through the Sentinels a kombu Sentinel URL lists (each part
    ``sentinel://[user:password@]host[:port][/db]``; the credentials and database are the
    master's, as kombu reads them); ``options``: more arguments of the master's client."""
    sentinels: list[tuple[str, int]] = []
    params: dict[str, Any] = {"socket_timeout": 30, "socket_connect_timeout": 10, **options}
    for part in broker_url.split(";"):
        parsed = urlsplit(part.strip())
        sentinels.append((parsed.hostname or "127.0.0.1", parsed.port or 26379))
        if parsed.password and "password" not in params:
            params.update(username=parsed.username or None, password=unquote(parsed.password))
        if parsed.path.strip("/").isdigit() and "db" not in params:
            params["db"] = int(parsed.path.strip("/"))
    found = Sentinel(sentinels, socket_timeout=5, socket_connect_timeout=2)  # type: ignore[no-untyped-call,unused-ignore]
    client: redis.Redis = found.master_for(master, redis.Redis, **params)  # type: ignore[no-untyped-call,unused-ignore]
    return client


def create_celery_app(settings: BrokerSettings, *, name: str = "sagafleet") -> Celery:
    """Build a Celery app with the fleet's safety settings; tasks are bound separately."""
    if settings.visibility_timeout_s <= settings.step_time_limit_s:
        # A message whose task outlives the visibility timeout is redelivered while it runs.
        raise ValueError("visibility_timeout_s must exceed step_time_limit_s")
    app = Celery(name, broker=settings.broker_url, set_as_current=False, task_cls=FleetTask,
                 amqp=ReliableAMQP)
    app.conf.update(
        # JSON only: a writable broker must never become code execution (no pickle).
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        event_serializer="json",
        # Results are events in PostgreSQL, never in a result backend.
        result_backend=None,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        # Ack after the work is done; requeue if the worker process dies mid-task.
        # Claims by stream version make the resulting duplicates no-ops.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        task_time_limit=settings.step_time_limit_s + 30,
        task_soft_time_limit=settings.step_time_limit_s,
        broker_transport_options=settings.transport_options,
        broker_connection_retry_on_startup=True,
        # One layer owns retries: the orchestrator. Publishing gives up fast and the
        # sweeper re-enqueues from the log instead of Celery retrying in a loop.
        task_publish_retry=True,
        task_publish_retry_policy={
            "max_retries": 3,
            "interval_start": 0.1,
            "interval_step": 0.2,
            "interval_max": 1.0,
        },
        task_default_queue=QUEUE_STEPS,
        task_routes={"sagafleet.commands.*": {"queue": QUEUE_COMMANDS}},
        worker_hijack_root_logger=False,
        # Celery's own tools: pidbox replies (inspect, ping, control) and task events
        # (celery events, Flower), both over the broker's pub/sub; see worker_options.
        worker_send_task_events=settings.remote_control and settings.task_events,
        worker_enable_remote_control=settings.remote_control,
        # Neither the arguments of a task nor the body of a message the worker drops reach
        # a log record: a saga command may carry a secret an agent should not have sent.
        worker_consumer=f"{__name__}:BodiesWithheldConsumer",
        task_create_missing_queues=True,
    )
    return app


def worker_options(settings: BrokerSettings) -> list[str]:
    """The ``celery worker`` options of the fleet's worker that follow ``remote_control``.

    Heartbeats are worker events (they tell ``celery events`` and Flower that a worker is
    online), so they go with remote control. Mingle and gossip stay off either way: mingle
    makes each starting worker wait for its peers to send revoked task ids and clocks (the
    fleet never revokes a task: cancelling is an event in the log), and gossip has every
    worker consume every other worker's events; no tool of Celery's needs either.
    """
    options = ["--without-mingle", "--without-gossip"]
    if not settings.remote_control:
        options.append("--without-heartbeat")
    return options
