"""Publishing step commands after the commit that scheduled them.

A publish that fails is logged and counted, never retried here: the sweeper finds the
scheduled-but-not-started work in the log and re-enqueues it.

Two publishers send the same messages. :class:`CeleryPublisher` is the plain path: Celery's
``send_task`` through a kombu producer. :class:`RedisStepPublisher` is the fleet's: Celery
still builds each message (``app.amqp.create_task_message``, the same headers and body),
and the publisher writes it as kombu's Redis transport stores one (the envelope JSON with
the body in base64) onto the steps queue, every message of a publish in one ``LPUSH``. It
skips what a step message never needs per publish: a producer from the pool, the queue's
declaration, kombu's retry wrapper and its second serialisation, about 0.5 ms of CPU a
publish. Anything listening to Celery's publish signals (OpenTelemetry's Celery
instrumentation, which carries the trace context in the headers) is served by the plain
path instead. ``tests/integration/fleet/test_publisher.py`` holds the two to the same
stored message.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any, Final

import redis
from celery import Celery
from celery.signals import after_task_publish, before_task_publish
from kombu.exceptions import KombuError, OperationalError
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from application.messages import StepCommand
from workers.celery_app import QUEUE_STEPS, STEP_TASK, broker_redis

log = logging.getLogger(__name__)


class CeleryPublisher:
    """Publishes step commands as Celery messages on the steps queue."""

    def __init__(self, app: Celery) -> None:
        self._app = app
        self.failures = 0

    def publish(self, commands: Sequence[StepCommand]) -> int:
        """Send each command; a broker failure is logged and left to the sweeper.

        Several commands go to Redis in one round trip (kombu's publish batch, where the
        installed kombu has one): they are sent when the batch ends, so if that send fails
        none of them counts as sent (each may have arrived; a duplicate step message is
        harmless, the claim decides)."""
        if not commands:
            return 0
        sent = tried = 0
        buffered: list[StepCommand] = []  # in the batch: in the broker once it is sent
        try:
            # One producer for the batch, and the argument text for the task's log line
            # given as is: Celery would otherwise format it with saferepr per message.
            with self._app.producer_or_acquire() as producer, \
                    _batch(producer, len(commands)) as batching:
                for command in commands:
                    tried += 1
                    args = command.as_args()
                    try:
                        self._app.send_task(STEP_TASK, args=args, queue=QUEUE_STEPS,
                                            producer=producer, argsrepr=repr(args),
                                            kwargsrepr="{}")
                    except (KombuError, OperationalError, OSError) as exc:
                        self.note_failure(command, exc)
                    else:
                        if batching:
                            buffered.append(command)
                        else:
                            sent += 1
        except (KombuError, OperationalError, OSError) as exc:  # no producer, or the batch
            for command in (*buffered, *commands[tried:]):  # was not sent
                self.note_failure(command, exc)
            return sent
        return sent + len(buffered)

    def note_failure(self, command: StepCommand, exc: BaseException) -> None:
        """Count and log one command whose publish failed."""
        self.failures += 1
        log.warning("publish of %s failed (sweeper will re-enqueue): %s", command, exc)


def _batch(producer: Any, size: int) -> contextlib.AbstractContextManager[Any]:
    """kombu's publish batch for ``size`` messages (sent once, when it ends), or a context
    that batches nothing (one message; a kombu without batches) and says so (False)."""
    batch = getattr(producer, "batch", None)
    if size < 2 or batch is None:
        return contextlib.nullcontext(False)
    return batch(max_size=size)  # type: ignore[no-any-return]


#: What a step message's envelope says of its body (kombu's Redis transport, JSON tasks).
_CONTENT = {"content-encoding": "utf-8", "content-type": "application/json"}


#: Delivery mode 2 (persistent), as Celery's default exchange gives a task message.
_PERSISTENT = 2


def fresh_ids(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs, each written as ``str(uuid.uuid4())`` writes one,
    from one read of the system's random source: Celery gives each message a task id and a
    delivery tag, and ``uuid.uuid4()`` reads the source and builds a UUID object for each
    (a publish of many messages, the sweeper's, paid ~2.5 us an id; this ~0.6 us)."""
    noise = bytearray(os.urandom(16 * count))
    noise[6::16] = bytes([byte & 0x0F | 0x40 for byte in noise[6::16]])  # version 4
    noise[8::16] = bytes([byte & 0x3F | 0x80 for byte in noise[8::16]])  # RFC 4122 variant
    text = noise.hex()
    return [f"{text[at:at + 8]}-{text[at + 8:at + 12]}-{text[at + 12:at + 16]}-"
            f"{text[at + 16:at + 20]}-{text[at + 20:at + 32]}" for at in range(0, 32 * count, 32)]


class RedisStepPublisher:
    """Publishes step commands onto the steps queue in one Redis round trip (see the module
    docstring); the same messages, counts and failures as :class:`CeleryPublisher`."""

    def __init__(self, app: Celery) -> None:
        self._app = app
        self._plain = CeleryPublisher(app)
        settings = app.conf.broker_transport_options or {}
        # This thread's first message with no parent task, by process: the template of its
        # later ones (a client's starts, the sweeper's re-publishes), built by Celery once.
        self._roots = threading.local()
        # Celery's publish retry policy, as redis-py's: a refused or broken connection is
        # tried three more times after growing waits (at most 1 s), then the publish fails
        # (the sweeper re-enqueues). A duplicate a retry may make is harmless (claims).
        self._redis = broker_redis(
            app.conf.broker_url, settings.get("master_name"),
            socket_timeout=settings.get("socket_timeout"),
            socket_connect_timeout=settings.get("socket_connect_timeout"),
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), 3),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError])

    @property
    def failures(self) -> int:
        """Commands whose publish failed (either path)."""
        return self._plain.failures

    def publish(self, commands: Sequence[StepCommand]) -> int:
        """Send the commands in one LPUSH; a broker failure is logged, counted for each and
        left to the sweeper (Redis takes all of one LPUSH or none)."""
        if not commands:
            return 0
        if before_task_publish.receivers or after_task_publish.receivers:
            return self._plain.publish(commands)  # someone watches Celery's publishes
        try:
            ids = iter(fresh_ids(2 * len(commands)))  # a task id and a delivery tag each
            first = self.message(commands[0], ids=ids)
            # The others share the first's parent task: Celery is not asked again.
            messages = [first, *(first.for_task(next(ids), command.as_args(), next(ids))
                                 for command in commands[1:])]
            # kombu pushes with LPUSH and takes from the other end: the first published is
            # the first taken, as for the plain path's one LPUSH a message.
            self._redis.lpush(QUEUE_STEPS, *(message.text for message in messages))
        except (redis.RedisError, OSError) as exc:
            for command in commands:
                self._plain.note_failure(command, exc)
            return 0
        return len(commands)

    def message(self, command: StepCommand, *, ids: Iterator[str] | None = None) -> _Message:
        """One command as kombu's Redis transport stores a message Celery sent to the steps
        queue (what ``send_task`` through a producer writes, for a new task id). ``ids``:
        where its task id and delivery tag come from (:func:`fresh_ids`; drawn here without).
        The other messages of a publish are this one's (:meth:`_Message.for_task`).

        A message sent from no task (a client's start, the sweeper) is built like the
        first such message of this thread and process: what Celery puts in it besides the
        ids and arguments (the thread's reply-to, the process's origin) is the same for
        every one of them. From inside a task Celery is asked each time (the task's ids).
        """
        args = command.as_args()
        task_id, delivery_tag = fresh_ids(2) if ids is None else (next(ids), next(ids))
        app = self._app
        # As send_task: a message sent from inside a task is its child (root and parent ids).
        parent = app.current_worker_task
        like = self._root_template() if parent is None else None
        if like is not None:
            return like.for_task(task_id, args, delivery_tag)
        request = parent.request if parent else None
        headers, properties, body, _ = app.amqp.create_task_message(
            task_id, STEP_TASK, args, {}, reply_to=app.thread_oid,
            root_id=(request.root_id or request.id) if request else None,
            parent_id=request.id if request else None,
            argsrepr=repr(args), kwargsrepr="{}", ignore_result=None)
        properties.update(
            argsrepr=headers["argsrepr"], kwargsrepr=headers["kwargsrepr"],
            delivery_mode=_PERSISTENT, delivery_info={"exchange": "", "routing_key": QUEUE_STEPS},
            priority=0, body_encoding="base64", delivery_tag=delivery_tag)
        message = _Message(task_id, headers, properties, body)
        if parent is None:
            self._roots.kept = (os.getpid(), message)
        return message

    def _root_template(self) -> _Message | None:
        """This thread's message with no parent task, if it built one in this process (a
        forked child keeps its parent's thread locals, not its origin)."""
        kept: tuple[int, _Message] | None = getattr(self._roots, "kept", None)
        return kept[1] if kept is not None and kept[0] == os.getpid() else None


class _Message:
    """A step message as Celery built it, and its text as kombu's Redis transport stores it."""

    def __init__(self, task_id: str, headers: dict[str, Any], properties: dict[str, Any],
                 body: Sequence[Any], text: str | None = None) -> None:
        """``text``: the stored text when the caller made it (:meth:`for_task`); else it is
        written from the other fields (:func:`_stored_text`)."""
        self.task_id, self.headers, self.properties, self.body = (
            task_id, headers, properties, body)
        self.text = _stored_text(headers, properties, body) if text is None else text

    def for_task(self, task_id: str, args: list[Any], delivery_tag: str) -> _Message:
        """This message for another task of the same publish: what Celery derives from the
        task id and the arguments is this one's own, and its delivery tag; the rest is
        shared. Its text is this one's with those fields written in (:attr:`_layout`), not
        encoded again whole."""
        argsrepr = repr(args)
        own_root = self.headers["root_id"] == self.task_id  # a root task: root_id is its id
        own: dict[str, Any] = {
            "id": task_id, "argsrepr": argsrepr, "correlation_id": task_id,
            "root_id": task_id if own_root else self.headers["root_id"],
            "delivery_tag": delivery_tag,
        }
        body = (args, *self.body[1:])
        own["body"] = base64.b64encode(json.dumps(body).encode()).decode()
        headers = {**self.headers, **{name: own[name] for name in _OWN_HEADERS}}
        properties = {**self.properties, **{name: own[name] for name in _OWN_PROPERTIES}}
        layout = self._layout
        text = "".join([piece if index % 2 == 0 else _json(own[piece])
                        for index, piece in enumerate(layout)])
        return _Message(task_id, headers, properties, body, text)

    @cached_property
    def _layout(self) -> list[str]:
        """This message's stored text cut around what :meth:`for_task` writes in: a piece
        of text, then the name of a field, alternately (written once per publish)."""
        headers = {**self.headers, **{name: _MARK.format(name) for name in _OWN_HEADERS}}
        properties = {**self.properties,
                      **{name: _MARK.format(name) for name in _OWN_PROPERTIES}}
        return _MARKED.split(_stored_text(headers, properties, None))


#: What :meth:`_Message.for_task` gives each message of its own, besides its body.
_OWN_HEADERS: Final = ("id", "argsrepr", "root_id")
_OWN_PROPERTIES: Final = ("correlation_id", "argsrepr", "delivery_tag")

#: A field to write in, in a layout's text (a NUL no value holds; JSON writes it \u0000).
_MARK: Final = "\0{}\0"
_MARKED: Final = re.compile(r'"\\u0000([a-z_]+)\\u0000"')


def _json(value: Any) -> str:
    """``json.dumps(value)`` for a message's own fields (texts, a root id that may be None),
    without the encoder's set-up per call."""
    if type(value) is str:
        return _ASCII_STRING(value)
    return "null" if value is None else json.dumps(value)


_ASCII_STRING: Final = json.encoder.encode_basestring_ascii  # what json.dumps writes a str as


def _stored_text(headers: dict[str, Any], properties: dict[str, Any],
                 body: Sequence[Any] | None) -> str:
    """A message as kombu's Redis transport stores it: the envelope JSON, the body in it as
    base64 of its JSON (None: the body's place marked, for a layout)."""
    encoded = (_MARK.format("body") if body is None
               else base64.b64encode(json.dumps(body).encode()).decode())
    return json.dumps({"body": encoded, **_CONTENT, "headers": headers, "properties": properties})
