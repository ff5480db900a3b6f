"""The publishing port: how the application sends a saga's due steps after the commit that
scheduled them (the adapters, Celery's and the one-round-trip Redis one, are
:mod:`workers.publisher`). A publish that fails is logged and counted, never retried: the
sweeper finds scheduled-but-not-started work in the log and re-enqueues it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from application.messages import StepCommand


class Publisher(Protocol):
    """Where step commands go once the events that scheduled them are committed."""

    def publish(self, commands: Sequence[StepCommand]) -> int:
        """Send the commands; return how many were sent (the rest the sweeper recovers)."""
