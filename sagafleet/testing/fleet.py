"""``TestFleet``: the real orchestration of sagas in one process, on memory and a test clock.

What runs is the production code — ``saga_core`` decides, the ``Orchestrator`` commits,
the ``StepExecutor`` claims and calls tools, the ``SagaClient`` starts and approves —
over in-memory ports instead of PostgreSQL and Redis:

* the log, definitions and secrets: the in-memory implementations of ``events.saga_log.port``;
* the broker: a :class:`RecordingPublisher`, a FIFO the fleet drains in order;
* time: a :class:`TestClock` that moves only when the test says so;
* the tools: whatever tool set is given (by default the trip tools in memory).

Nothing runs on its own. :meth:`TestFleet.run_until_idle` handles queued step commands one
at a time until none are left (:meth:`TestFleet.run_next` handles one);
:meth:`TestFleet.advance` moves the clock, stopping at each moment something falls due
(a retry's backoff, an expiring lease or approval, a lookup after a commit horizon) to do
what a sweeper pass does and run until idle again. Every run of the same scenario makes
the same events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from datetime import datetime, timedelta
from typing import Any, TypeVar

from application.client import SagaClient
from application.gate_windows.memory import MemoryGateWindows
from application.messages import StepCommand
from application.orchestrator import Orchestrator
from application.principals.memory import MemoryPrincipals
from application.secrets.guard import SecretGuard
from application.secrets.memory import MemorySecrets
from application.telemetry.metrics import WorkerMetrics
from events.definition_store.memory import MemoryDefinitions
from events.eventstore.model import Position, RecordedEvent
from events.saga_log.memory import MemorySagaLog
from events.saga_log.port import LoadedSaga
from events.saga_log.streams import saga_id_of, saga_stream
from saga_core import SagaDefinition
from saga_core.access.roles import Principal, PrincipalKind
from saga_core.definitions.validation import validate_definition
from saga_core.engine.condition_rules import compensation_deadline
from saga_core.engine.events import SagaEvent
from saga_core.engine.state import RunStatus, SagaState
from saga_core.engine.stops import deadline, limits_apply
from saga_core.errors import ErrorKind, SagaError
from sagafleet.example_sagas import trip_definition
from sagafleet.testing.clock import TestClock
from sagafleet.testing.publisher import RecordingPublisher
from sagafleet.testing.tools import InMemoryTools, WorkerCrashed
from sagafleet.testing.trip import TripTools
from workers.branches import SagaBranches
from workers.executor import StepExecutor
from workers.sweeper import sweep_saga
from workers.tools import ToolSet

T = TypeVar("T")

__all__ = ["FleetMisconfigured", "NeverIdle", "TestFleet"]

#: Handled commands after which run_until_idle gives up: a saga that never settles is a bug.
MAX_STEPS = 100_000
#: Steps a worker runs in turn after a message without a broker round trip (as FleetConfig).
INLINE_STEPS = 8
#: Events the tracker reads from the log at a time.
TRACK_PAGE = 1000
#: Nothing is in flight between runs, so no queue wait: all due work is lost work (the
#: sweep and each commit's due time count it alike).
QUEUE_WAIT = timedelta(0)


class FleetMisconfigured(SagaError):
    """A clock given to the fleet that is not its tools' clock (a tool set that does not
    match its catalogue is ``workers.tools.ToolSetMismatch``, as in a real fleet)."""

    kind = ErrorKind.MISCONFIGURED


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
        inline_steps: int = INLINE_STEPS,
        worker_id: str = "testfleet",
    ) -> None:
        """Build the fleet and register ``definitions`` (validated against the catalogue)
        as its shared set, visible to every tenant (``client(tenant=...).register_definition``
        registers one tenant's own).

        With no ``tools``: the trip tools in memory and, unless ``definitions`` says
        otherwise, the trip definition. ``InMemoryTools`` bring their own clock, which the
        fleet then runs on; ``lease_s`` and ``inline_steps`` are the worker's settings.
        """
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
        tool_set.check()  # ToolSetMismatch, naming each tool, as a real fleet refuses
        self.catalogue = tool_set.catalogue
        self.secrets = MemorySecrets()
        self.definitions = MemoryDefinitions(clock=self.clock)
        self.log = MemorySagaLog(self.definitions, clock=self.clock)
        self.publisher = RecordingPublisher()
        self.gate_windows = MemoryGateWindows()
        self.orchestrator = Orchestrator(self.log, self.clock, queue_wait=QUEUE_WAIT,
                                         windows=self.gate_windows)
        self.metrics = WorkerMetrics()
        # Secret values are looked for by value where they must not be, as on a real fleet.
        self.secret_guard = SecretGuard(self.secrets, self.metrics)
        self.executor = StepExecutor(self.orchestrator, tool_set.registry, self.secrets,
                                     worker_id=worker_id, lease=timedelta(seconds=lease_s),
                                     metrics=self.metrics, guard=self.secret_guard)
        self.inline_steps = inline_steps
        self.crashed: list[StepCommand] = []  # messages whose worker died mid-step
        self._active: dict[str, None] = {}  # unfinished sagas in start order (the tracker's)
        self._checkpoint: Position | None = None
        self._folded: dict[str, LoadedSaga] = {}  # the tracker's sagas as last folded
        self.principals = MemoryPrincipals(self.clock)
        # The fleet's own definitions are its shared, read-only set, as a real fleet's
        # built-in trip is: every tenant's client sees and starts them.
        for definition in definitions or ():
            self.definitions.register_shared(validate_definition(definition, self.catalogue),
                                             registered_by="testfleet")

    def client(self, *, tenant: str = "default", actor: str = "agent") -> SagaClient:
        """The real SagaClient, acting for ``tenant`` as the in-process agent ``actor``."""
        return self.client_for(Principal.in_process_agent(tenant, actor))

    def client_for(self, principal: Principal) -> SagaClient:
        """The real SagaClient acting as ``principal`` on this fleet."""
        return SagaClient(self.orchestrator, self.definitions, self.catalogue,
                          secrets=self.secrets, publisher=self.publisher,
                          principal=principal, guard=self.secret_guard)

    def authenticate(self, token: str) -> Principal:
        """The principal a token of :attr:`principals` proves (else ``Unauthenticated``)."""
        return self.principals.authenticate(token)

    def person(self, name: str, *, roles: Iterable[str] = ("approver",),
               tenant: str = "default") -> SagaClient:
        """A SagaClient acting as a person authenticated by the fleet's directory: adds
        ``name`` to ``tenant`` with ``roles``, proves its token, and acts as it (an
        approver by default), as the command line does with SAGAFLEET_TOKEN."""
        issued = self.principals.add(tenant, name, PrincipalKind.PERSON, roles)
        return self.client_for(self.authenticate(issued.token))

    # -- running

    def run_until_idle(self) -> int:
        """Handle queued step commands, oldest first, until none are left; return how many."""
        for handled in range(MAX_STEPS):
            if not self.run_next():
                return handled
        raise NeverIdle(f"still busy after {MAX_STEPS} step commands")

    def run_next(self) -> bool:
        """Run the oldest queued message as a worker would; False when there is none (one
        step of :meth:`run_until_idle`, for tests that interleave their own moves)."""
        command = self.publisher.take()
        if command is None:
            return False
        # The worker's own path: the command and its due siblings claimed in one append,
        # then what each result claims next, up to inline_steps deep; branches take turns.
        branches = SagaBranches(self.executor, self.publisher, _InTurn(),
                                budget=self.inline_steps)
        try:
            branches.run(command)
        except WorkerCrashed:
            # The worker died mid-step: the message is gone and its claims stay in the log
            # until their leases run out, as after a SIGKILL.
            self.crashed.append(command)
        return True

    def sweep(self) -> int:
        """One sweeper pass over the unfinished sagas: re-enqueue what is due, record what
        decide wants now (expired leases and approvals); return how many items were due."""
        self._track()
        self.secrets.purge_expired(self.clock())  # deposited secrets no start used in time
        found = 0
        for loaded in self._unfinished():
            swept = sweep_saga(self.orchestrator, loaded, QUEUE_WAIT)
            found += len(swept.due)
            self.publisher.publish(swept.wake_ups)
        return found

    def _track(self) -> None:
        """Follow the log for started and finished sagas, as the sweeper's tracker does."""
        while page := self.log.store.read_all(self._checkpoint, TRACK_PAGE):
            for record in page:
                saga_id = saga_id_of(record.stream_id)
                if saga_id is None:
                    continue
                if record.type == "SagaStarted":
                    self._active[saga_id] = None
                elif record.type == "SagaFinished":
                    self._active.pop(saga_id, None)
                    self._folded.pop(saga_id, None)
                    self.secrets.purge(saga_id)  # nothing runs after the end
            self._checkpoint = page[-1].position

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` ahead, stopping at each moment work falls due on the
        way (a backoff ending, a lease or an approval running out, a lookup's time) for a
        sweeper pass and a run until idle, so a chain of retries plays out as it would."""
        if seconds < 0:
            raise ValueError(f"time only moves forward, not by {seconds} s")
        end = self.clock() + timedelta(seconds=seconds)
        while True:
            self.run_until_idle()
            self.sweep()
            self.run_until_idle()
            due = self._next_due()
            if due is None or due > end:
                break
            self.clock.advance((due - self.clock()).total_seconds())
        # A slow_answer fault moves the clock during a run: it may be past ``end`` already.
        self.clock.advance(max((end - self.clock()).total_seconds(), 0.0))
        self.sweep()
        self.run_until_idle()

    def _next_due(self) -> datetime | None:
        """The next moment after now that something of an unfinished saga falls due (of
        the sagas the last sweep tracked: only a client call starts one, never a run)."""
        now = self.clock()
        times = [due for loaded in self._unfinished() for due in due_times(loaded.state)
                 if due > now]
        return min(times, default=None)

    def _unfinished(self) -> list[LoadedSaga]:
        """Every unfinished saga the tracker knows, folded; a saga whose stream has not
        moved is not folded again (passes over many waiting sagas would dominate a run)."""
        stale = [saga_id for saga_id in self._active
                 if (known := self._folded.get(saga_id)) is None
                 or known.version != self.log.store.stream_version(saga_stream(saga_id))]
        for saga_id, loaded in self.log.load_many(stale).items():
            if isinstance(loaded, SagaError):
                raise loaded
            self._folded[saga_id] = loaded
        return [self._folded[saga_id] for saga_id in self._active]

    # -- evidence

    def events(self, saga_id: str) -> list[SagaEvent]:
        """The saga's events as recorded, oldest first."""
        return list(self.log.load_history(saga_id).events)

    def trace(self, trace_id: str, *, tenant: str = "default") -> list[RecordedEvent]:
        """Every event the tenant's sagas recorded under a lineage trace id, in log order
        (``sagafleet find --trace`` on a real fleet)."""
        return self.log.store.events_of_trace(tenant, trace_id)

    def state(self, saga_id: str) -> SagaState:
        """The saga's folded state (``saga_core.engine.state.SagaState``)."""
        return self.log.load(saga_id).state


def due_times(state: SagaState) -> list[datetime]:
    """When each waiting operation of an unfinished saga falls due: a scheduled step or
    lookup, a lease, a step timeout or an approval running out, a compensation deadline or
    the time limit passing (the moments ``saga_core.due_work`` checks)."""
    if not state.started or state.finished is not None or state.escalation is not None:
        return []
    times: list[datetime] = []
    limit = deadline(state)
    if limit is not None and limits_apply(state):
        times.append(limit)
    for run in [*state.forward.values(), *state.compensation.values()]:
        if run.status in (RunStatus.SCHEDULED, RunStatus.RECONCILING) and run.not_before:
            times.append(run.not_before)
        elif run.status is RunStatus.STARTED and run.lease_expires_at is not None:
            times.append(run.lease_expires_at)
            if run.timeout_at is not None:
                times.append(run.timeout_at)
        elif run.status is RunStatus.AWAITING_APPROVAL and run.approval is not None:
            approval = run.approval
            granted = approval.grant_expires_at if approval.status == "granted" else None
            times.append(granted or approval.expires_at)
    for step_id in state.compensation:
        passes = compensation_deadline(state, step_id)
        if passes is not None:
            times.append(passes)
    return times


class _InTurn(Executor):
    """Runs each submitted branch at once, on the calling thread: one order, every run."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn`` now; its result or exception is in the returned future."""
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # a WorkerCrashed (BaseException) goes on up, as a crash
            future.set_exception(exc)
        return future
