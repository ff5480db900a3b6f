"""``TestFleet``: the real orchestration of sagas in one process, on memory and a test clock.

What runs is the production code — ``saga_core`` decides, the ``Orchestrator`` commits,
the ``StepExecutor`` claims and calls tools, the ``SagaClient`` starts and approves —
over in-memory ports instead of PostgreSQL and Redis:

* the log, definitions and secrets: the in-memory implementations of ``events.saga_log``;
* the broker: a :class:`RecordingPublisher`, a FIFO the fleet drains in order;
* time: a :class:`TestClock` that moves only when the test says so;
* the tools: whatever tool set is given (by default the trip tools in memory).

Nothing runs on its own. :meth:`TestFleet.run_until_idle` handles queued step commands one
at a time until none are left; :meth:`TestFleet.advance` moves the clock, stopping at each
moment something falls due (a retry's backoff, an expiring lease or approval, a lookup
after a commit horizon) to do what a sweeper pass does and run until idle again. Every run
of the same scenario makes the same events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, cast

from events.sagas import LoadedSaga
from saga_core import SagaDefinition, due_work
from saga_core.errors import SagaError
from saga_core.events import SagaEvent
from saga_core.examples import trip_definition
from saga_core.state import RunStatus, SagaState
from sagafleet.testing._stopgap_memory import MemoryDefinitions, MemorySagaLog, MemorySecrets
from sagafleet.testing.clock import TestClock
from sagafleet.testing.publisher import RecordingPublisher
from sagafleet.testing.tools import InMemoryTools, WorkerCrashed
from sagafleet.testing.trip import TripTools
from workers.client import SagaClient
from workers.executor import StepExecutor
from workers.messages import StepCommand
from workers.orchestrator import Orchestrator
from workers.tools import ToolSet

__all__ = ["FleetMisconfigured", "NeverIdle", "TestFleet"]

#: Handled commands after which run_until_idle gives up: a saga that never settles is a bug.
MAX_STEPS = 100_000


class FleetMisconfigured(SagaError):
    """The tool set does not implement every tool its catalogue lists."""


class NeverIdle(SagaError):
    """The queue kept refilling past the step limit: something re-enqueues forever."""


class TestFleet:
    """Sagas run on the real orchestration code, in memory, on a clock the test moves."""

    __test__ = False  # not a pytest test class, whatever its name says

    def __init__(
        self,
        definitions: Iterable[SagaDefinition] | None = None,
        tools: InMemoryTools | ToolSet | None = None,
        *,
        clock: TestClock | None = None,
        lease_s: float = 30.0,
        worker_id: str = "testfleet",
    ) -> None:
        if tools is None:
            tools = TripTools(clock or TestClock())
            definitions = [trip_definition()] if definitions is None else definitions
        if isinstance(tools, InMemoryTools):
            # The tools' clock (slow visibility) and the fleet's are one clock.
            if clock is not None and clock is not tools.clock:
                raise FleetMisconfigured("give the clock to the tools or to the fleet, not both")
            clock = tools.clock
        self.clock = clock or TestClock()
        self.tools = tools
        tool_set = tools.tool_set() if isinstance(tools, InMemoryTools) else tools
        missing = [f"{s.name}@{s.version}" for s in tool_set.catalogue.tools
                   if not tool_set.registry.has(s.name, s.version)]
        if missing:
            raise FleetMisconfigured(f"catalogue tools without an implementation: {missing}")
        self.catalogue = tool_set.catalogue
        self.secrets = MemorySecrets()
        self.definitions = MemoryDefinitions()
        self.log = MemorySagaLog(self.definitions, self.secrets)
        self.publisher = RecordingPublisher()
        self.orchestrator = Orchestrator(cast(Any, self.log), self.publisher, self.clock)
        self.executor = StepExecutor(self.orchestrator, tool_set.registry,
                                     worker_id=worker_id, lease=timedelta(seconds=lease_s))
        self.executor.vault = cast(Any, self.secrets)  # STOPGAP: the executor takes Secrets
        self.crashed: list[StepCommand] = []  # commands whose worker died mid-step
        self.sweeps = 0
        self._claimed: deque[tuple[StepCommand, LoadedSaga]] = deque()
        admin = self.client(actor="testfleet")
        for definition in definitions or ():
            admin.register_definition(definition)

    def client(self, *, tenant: str = "default", actor: str = "agent") -> SagaClient:
        """The real SagaClient, acting for ``tenant`` as ``actor`` on this fleet."""
        client = SagaClient(self.orchestrator, cast(Any, self.definitions), self.catalogue,
                            tenant=tenant, actor=actor)
        client.vault = cast(Any, self.secrets)  # STOPGAP: the client takes Secrets
        return client

    # -- running

    def run_until_idle(self) -> int:
        """Handle queued step commands, oldest first, until none are left; return how many."""
        for handled in range(MAX_STEPS):
            if not self._run_next():
                return handled
        raise NeverIdle(f"still busy after {MAX_STEPS} step commands")

    def _run_next(self) -> bool:
        """Run one step command as the worker would; False when there is none."""
        claimed = self._claimed.popleft() if self._claimed else None
        command = claimed[0] if claimed else self.publisher.take()
        if command is None:
            return False
        try:
            if claimed is not None:
                # A sibling claimed together with an earlier command: it runs first, as on
                # a worker's branch thread, since its lease is already ticking.
                self.executor.run_claimed(command, claimed[1])
            else:
                self.executor.handle(command, siblings=self._claim_siblings)
        except WorkerCrashed:
            # The worker died mid-step: its message is gone and its claim stays in the log
            # until the lease runs out, as after a SIGKILL.
            self.crashed.append(command)
        return True

    def _claim_siblings(self, commands: list[StepCommand], loaded: LoadedSaga) -> None:
        self._claimed.extend((command, loaded) for command in commands)

    def sweep(self) -> int:
        """One sweeper pass over every unfinished saga: re-enqueue what is due, record what
        decide wants now (expired leases and approvals); return the items found."""
        self.sweeps += 1
        now = self.clock()
        found = 0
        for saga_id in self.log.saga_ids():
            loaded = self.log.load(saga_id)
            # Nothing is in flight between runs, so no queue wait: all due work is lost work.
            items = due_work(loaded.state, now, timedelta(0))
            found += len(items)
            republish = [StepCommand(saga_id=saga_id, step_id=item.step_id, kind=item.kind,
                                     attempt=item.attempt)
                         for item in items
                         if item.action in ("execute", "reconcile") and item.step_id
                         and item.kind]
            if len(republish) < len(items):
                self.orchestrator.advance(saga_id)
            self.publisher.publish(republish)
        return found

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` ahead, stopping at each moment work falls due on the
        way to sweep and run until idle, so a chain of backoffs plays out as it would."""
        self.run_until_idle()
        end = self.clock() + timedelta(seconds=seconds)
        while True:
            due = self._next_due()
            if due is None or due > end:
                break
            if due > self.clock():
                self.clock.advance((due - self.clock()).total_seconds())
            before = self.log.event_count()
            self.sweep()
            self.run_until_idle()
            if self.log.event_count() == before:
                break  # nothing came of it (say, a step blocked behind another): jump ahead
        self.clock.advance(max(0.0, (end - self.clock()).total_seconds()))
        self.sweep()
        self.run_until_idle()

    def _next_due(self) -> datetime | None:
        times = [t for saga_id in self.log.saga_ids()
                 if (t := next_due(self.log.load(saga_id).state)) is not None]
        return min(times, default=None)

    # -- evidence

    def events(self, saga_id: str) -> list[SagaEvent]:
        """The saga's events as recorded, oldest first."""
        return list(self.log.load(saga_id).events)

    def state(self, saga_id: str) -> SagaState:
        """The saga's folded state (``saga_core.state.SagaState``)."""
        return self.log.load(saga_id).state


def next_due(state: SagaState) -> datetime | None:
    """The earliest moment something of an unfinished saga falls due: a scheduled step or
    lookup, a lease or an approval running out (what ``saga_core.due_work`` looks at)."""
    if not state.started or state.finished is not None or state.escalation is not None:
        return None
    times: list[datetime] = []
    for run in [*state.forward.values(), *state.compensation.values()]:
        if run.status in (RunStatus.SCHEDULED, RunStatus.RECONCILING) and run.not_before:
            times.append(run.not_before)
        elif run.status is RunStatus.STARTED and run.lease_expires_at is not None:
            times.append(run.lease_expires_at)
        elif run.status is RunStatus.AWAITING_APPROVAL and run.approval is not None:
            approval = run.approval
            granted = approval.grant_expires_at if approval.status == "granted" else None
            times.append(granted or approval.expires_at)
    return min(times, default=None)
