"""A publisher that keeps step commands in a FIFO instead of sending them to a broker."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from application.messages import StepCommand


class RecordingPublisher:
    """Same interface as ``workers.publisher.CeleryPublisher``; the test kit drains the queue.

    Every command ever published stays in :attr:`published` (for assertions such as "the
    sweeper re-enqueued this step once"); :meth:`take` hands the pending ones out in the
    order they were published, which makes a run deterministic.
    """

    def __init__(self) -> None:
        self.published: list[StepCommand] = []
        self._pending: deque[StepCommand] = deque()
        self.failures = 0  # kept for parity with CeleryPublisher: a FIFO never fails

    def publish(self, commands: Sequence[StepCommand]) -> int:
        """Queue the commands; return how many were queued (all of them)."""
        self.published.extend(commands)
        self._pending.extend(commands)
        return len(commands)

    def take(self) -> StepCommand | None:
        """The oldest command not yet taken, or None when the queue is empty."""
        return self._pending.popleft() if self._pending else None

    def peek(self) -> list[StepCommand]:
        """The commands queued and not yet taken, oldest first (the queue is left as is)."""
        return list(self._pending)

    def drop_pending(self) -> list[StepCommand]:
        """Lose every queued command, as a broker restart would; return what was lost."""
        lost = list(self._pending)
        self._pending.clear()
        return lost

    def __len__(self) -> int:
        return len(self._pending)
