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
        sent = 0
        for command in commands:
            try:
                self._app.send_task(STEP_TASK, args=command.as_args(), queue=QUEUE_STEPS)
                sent += 1
            except (KombuError, OperationalError, OSError) as exc:
                self.failures += 1
                log.warning("publish of %s failed (sweeper will re-enqueue): %s", command, exc)
        return sent
