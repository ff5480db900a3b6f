"""How a worker runs one step message: the saga's due branches side by side, then onwards.

A wake-up stands for every step of its saga that is due (see
:func:`application.orchestrator.wake_ups`): :class:`SagaBranches` claims the command and its
due siblings in one append, runs each sibling on a branch thread and the command on the
calling thread, and records each result with a commit that also claims the steps due
next for this worker, which it then runs in turn without a broker round trip (up to
``budget`` steps deep). What a commit leaves for others — its ``wake_ups`` — is published
after that commit, never before. Correctness never depends on these shortcuts: an
unfinished claim expires and the sweeper comes back to it.

Results that are ready together are recorded together: a branch whose result is ready
queues it, and the one whose turn it is to commit takes every result queued by then into
its append (the others' work is done; they go on with nothing). So siblings that finish
at once cost one commit, not one each. A branch about to commit while a sibling is still
calling its tool first lets that sibling run (it yields the interpreter, ``time.sleep(0)``):
a tool that answers at once (in process, or from a cache) has its result in the same
append; one that waits on the network is not waited for.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from application.messages import StepCommand
from application.orchestrator import Committed
from application.publishing import Publisher
from events.saga_log.port import LoadedSaga
from saga_core import ResolvedCommand
from saga_core.engine.events import SagaEvent
from saga_core.errors import SagaError
from workers.executor import Claimed, StepExecutor

log = logging.getLogger(__name__)


@dataclass
class _Result:
    """A branch's result waiting for its turn to be recorded."""

    command: StepCommand
    result: SagaEvent
    known: LoadedSaga
    taken: bool = False  # into a commit (its branch's, or a sibling's)


class SagaBranches:
    """The branches of one saga this worker runs for one message, and their shared state.

    Their tools run concurrently; their commits take turns: each starts from the newest
    state any of them committed (not the one its branch began with), so branches of one
    saga never race each other for the stream version.
    """

    def __init__(
        self, executor: StepExecutor, publisher: Publisher, threads: Executor, *, budget: int
    ) -> None:
        self.executor = executor
        self.publisher = publisher
        self.threads = threads
        self.budget = budget  # steps a branch may run in turn after its first
        self._lock = threading.Lock()  # one commit at a time
        self._queue_lock = threading.Lock()  # guards _queued and _calling
        self._queued: list[_Result] = []
        self._calling = 0  # commands handed to a branch whose result is not queued yet
        self._latest: LoadedSaga | None = None
        self._running: list[Future[None]] = []

    def run(self, command: StepCommand) -> None:
        """Handle one message: claim, run the branches, follow what they claim; never raise."""
        self._guarded(command, lambda: self._start(command))

    def _start(self, command: StepCommand) -> None:
        # The siblings are claimed in the command's own append and set off before its tool
        # is called, so parallel branches cost one message, one read and one claim.
        claimed = self.executor.claim(command, ahead=self.executor.claim_ahead)
        self._published(claimed.committed)
        if isinstance(claimed, Claimed):
            committed = claimed.committed
            self._remember(committed)
            self._handed(1)
            self._spawn(committed.claimed, committed.loaded, self.budget)
            self._follow(command, claimed.resolved, committed.loaded, self.budget)

    def join(self) -> None:
        """Wait for every branch, including those spawned meanwhile."""
        while self._running:
            self._running.pop().result()

    def _spawn(self, commands: tuple[StepCommand, ...], loaded: LoadedSaga, budget: int) -> None:
        """Run each claimed command (and what it claims next) on a branch thread."""
        self._handed(len(commands))
        for command in commands:
            # Each branch runs in a copy of this context: its log records and trace spans
            # belong to the message that claimed it.
            context = contextvars.copy_context()
            self._running.append(
                self.threads.submit(context.run, self._branch, command, loaded, budget))

    def _branch(self, command: StepCommand, loaded: LoadedSaga, budget: int) -> None:
        self._guarded(command, lambda: self._follow(
            command, self._resolution(command, loaded), loaded, budget))

    def _resolution(self, command: StepCommand, loaded: LoadedSaga) -> ResolvedCommand:
        """What the claim of a handed command resolved (if that fails, it is no longer
        counted as calling)."""
        try:
            return self.executor.resolution(command, loaded)
        except BaseException:
            self._handed(-1)
            raise

    @staticmethod
    def _guarded(command: StepCommand, work: Callable[[], None]) -> None:
        """Run ``work``; log, never raise (a branch thread must never die silently)."""
        try:
            work()
        except SagaError as exc:
            # The log is consistent; an unfinished claim expires and the sweeper reconciles.
            log.error("step %s failed to run: %s", command, exc)
        except Exception:
            log.exception("step %s crashed", command)

    def _follow(
        self, command: StepCommand, resolved: ResolvedCommand, loaded: LoadedSaga, budget: int
    ) -> None:
        """Run a claimed command (handed to this branch), record its result, and go on
        with what that claimed."""
        while True:
            try:
                result = self.executor.call(command, resolved, loaded)
            except BaseException:
                self._handed(-1)
                raise
            committed = self._record(command, result, loaded, budget)
            self._published(committed)
            if committed is None or not committed.claimed:
                return
            # The saga's next steps were claimed in the same commit: run them here.
            budget -= 1
            first, *others = committed.claimed
            self._handed(1)
            self._spawn(tuple(others), committed.loaded, budget)
            command, loaded = first, committed.loaded
            resolved = self._resolution(command, loaded)

    def _handed(self, commands: int) -> None:
        """Count commands handed to branches (negative: dropped before their result)."""
        with self._queue_lock:
            self._calling += commands

    def calling(self) -> int:
        """How many handed commands have no result queued yet (their tool is running)."""
        with self._queue_lock:
            return self._calling

    def pause(self) -> None:
        """Before a commit while siblings are calling: let one whose tool answers at once
        queue its result, so the commit takes it too (yields the interpreter once; a
        sibling waiting on the network is not waited for)."""
        time.sleep(0)

    def _record(
        self, command: StepCommand, result: SagaEvent, known: LoadedSaga, budget: int
    ) -> Committed | None:
        """Record from the newest state any branch committed, with every result queued by
        then; claim ahead while in budget. None when a sibling's commit took this result
        (that branch publishes and follows what its commit claimed)."""
        mine = _Result(command, result, known)
        with self._queue_lock:
            self._queued.append(mine)
            self._calling -= 1
            siblings_calling = self._calling > 0
        if siblings_calling:
            self.pause()
        with self._lock:
            with self._queue_lock:
                if mine.taken:
                    return None
                taken, self._queued = self._queued, []
                for queued in taken:
                    queued.taken = True
            start = max((queued.known for queued in taken), key=lambda saga: saga.version)
            if self._latest is not None and self._latest.version > start.version:
                start = self._latest
            ahead = self.executor.claim_ahead if budget > 0 else None
            try:
                committed = self.executor.record_together(
                    [(queued.command, queued.result) for queued in taken], start, ahead=ahead)
            except BaseException:
                others = [queued.command for queued in taken if queued is not mine]
                if others:  # their branches ended with nothing to report
                    log.error("the results of %s were not recorded either", others)
                raise
            self._remember(committed)
            return committed

    def _remember(self, committed: Committed | None) -> None:
        if committed is not None and (
            self._latest is None or committed.loaded.version > self._latest.version
        ):
            self._latest = committed.loaded

    def _published(self, committed: Committed | None) -> None:
        """Publish what a commit left for any worker to take (after it committed)."""
        if committed is not None and committed.wake_ups:
            self.publisher.publish(committed.wake_ups)
