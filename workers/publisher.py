"""Publishing step commands after the commit that scheduled them.

A publish that fails is logged and counted, never retried here: the sweeper finds the
scheduled-but-not-started work in the log and re-enqueues it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from celery import Celery
from kombu.exceptions import KombuError, OperationalError

from workers.celery_app import QUEUE_STEPS, STEP_TASK
from workers.messages import StepCommand

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """Where step commands go once the events that scheduled them are committed."""

    def publish(self, commands: Sequence[StepCommand]) -> int:
        """Send the commands; return how many were sent (the rest the sweeper recovers)."""


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
                        self._failed(command, exc)
                    else:
                        if batching:
                            buffered.append(command)
                        else:
                            sent += 1
        except (KombuError, OperationalError, OSError) as exc:  # no producer, or the batch
            for command in (*buffered, *commands[tried:]):  # was not sent
                self._failed(command, exc)
            return sent
        return sent + len(buffered)

    def _failed(self, command: StepCommand, exc: BaseException) -> None:
        self.failures += 1
        log.warning("publish of %s failed (sweeper will re-enqueue): %s", command, exc)


def _batch(producer: Any, size: int) -> contextlib.AbstractContextManager[Any]:
    """kombu's publish batch for ``size`` messages (sent once, when it ends), or a context
    that batches nothing (one message; a kombu without batches) and says so (False)."""
    batch = getattr(producer, "batch", None)
    if size < 2 or batch is None:
        return contextlib.nullcontext(False)
    return batch(max_size=size)  # type: ignore[no-any-return]
