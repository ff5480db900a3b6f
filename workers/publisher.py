"""Publishing step commands after the commit that scheduled them.

A publish that fails is logged and counted, never retried here: the sweeper finds the
scheduled-but-not-started work in the log and re-enqueues it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

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
        """Send each command; a broker failure is logged and left to the sweeper."""
        if not commands:
            return 0
        sent = tried = 0
        try:
            # One producer for the batch, and the argument text for the task's log line
            # given as is: Celery would otherwise format it with saferepr per message.
            with self._app.producer_or_acquire() as producer:
                for command in commands:
                    tried += 1
                    args = command.as_args()
                    try:
                        self._app.send_task(STEP_TASK, args=args, queue=QUEUE_STEPS,
                                            producer=producer, argsrepr=repr(args),
                                            kwargsrepr="{}")
                        sent += 1
                    except (KombuError, OperationalError, OSError) as exc:
                        self._failed(command, exc)
        except (KombuError, OperationalError, OSError) as exc:  # no producer to send with
            for command in commands[tried:]:
                self._failed(command, exc)
        return sent

    def _failed(self, command: StepCommand, exc: BaseException) -> None:
        self.failures += 1
        log.warning("publish of %s failed (sweeper will re-enqueue): %s", command, exc)
