"""The projector process: one runner thread per projection, until told to stop."""

from __future__ import annotations

import threading

from projections.context import ProjectionContext
from projections.runner import ProjectionRunner
from projections.tables import PROJECTIONS


class Projector:
    """Runs every projection continuously from its checkpoint (several copies may run)."""

    def __init__(
        self, ctx: ProjectionContext, *, batch_size: int = 500, poll_s: float = 1.0
    ) -> None:
        self.ctx = ctx
        self.poll_s = poll_s
        self.stop_event = threading.Event()
        self.runners = [ProjectionRunner(ctx, name, batch_size=batch_size) for name in PROJECTIONS]
        self._threads: list[threading.Thread] = []

    def start(self) -> Projector:
        """Start one thread per projection."""
        for runner in self.runners:
            thread = threading.Thread(
                target=runner.run_forever,
                args=(self.stop_event,),
                kwargs={"poll_s": self.poll_s},
                name=f"projection-{runner.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        return self

    def wait(self, timeout: float | None = None) -> None:
        """Block until stopped (or ``timeout`` seconds pass)."""
        self.stop_event.wait(timeout)

    def stop(self) -> None:
        """Ask every runner to stop, wait for them, release their locks."""
        self.stop_event.set()
        for thread in self._threads:
            thread.join(timeout=30)
        for runner in self.runners:
            runner.close()
