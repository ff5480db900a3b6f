"""Where a saga event is written: fold, let saga_core decide, claim, append once.

Every append to a saga stream — a claim, a result, a lookup's answer, an operator action,
a start, the sweeper's decision — is planned, then written, on the saga as it was loaded:

1. :meth:`Orchestrator.plan_commit` (values in, a value out: :class:`CommitPlan`) folds the
   given events into the loaded state, then asks ``decide`` until it settles
   (:func:`settle`), each decision recorded as an event; with a :class:`ClaimAhead` (what
   the committer will run next) it claims the steps now due for it
   (:func:`application.claiming.claims_ahead`): their ``StepStarted`` events ride in the same
   append, so a worker continuing a saga saves a commit and a broker message per step. The
   plan holds what to append and at which expected version (the version it was loaded at).
2. :meth:`Orchestrator.write` appends the plan through the
   :class:`~events.saga_log.port.SagaLog` (``ConcurrencyError`` when another writer got there
   first), optionally inside the caller's unit of work, with the saga's next due time
   (``saga_core.engine.due.next_due``: when the sweeper should look at it again, if ever); a
   claim of a call whose gate has a tenant window reserves its amount in the same unit
   (:class:`~application.gate_windows.port.GateWindows`; :class:`WindowLimitReached`, nothing
   written, when it would pass the window), and a call that turned out to have had no effect
   releases its reservation in the same unit (``saga_core.approval.totals``). It returns
   :class:`Committed`: the events, the saga as they left it, the commands they made due,
   those claimed, and the ``wake_ups`` worth a broker message.

:meth:`Orchestrator.commit` is the two in a row. Nothing is published here: the caller
publishes ``Committed.wake_ups`` after its own transaction commits (intent before effect,
message after commit). A lost race is retried in exactly one loop, :meth:`Orchestrator.attempts`,
which the caller runs itself, reading top to bottom::

    for attempt in orchestrator.attempts(saga_id, known=loaded):
        with attempt:  # a lost race ends this attempt; the next one reads the saga afresh
            committed = orchestrator.commit(attempt.loaded, decide_events(attempt.loaded))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType

from application.claiming import ClaimAhead, claims_ahead
from application.gate_windows.port import GateWindows
from application.messages import StepCommand
from events import ConcurrencyError
from events.eventstore.model import AppendResult, Clock, utc_now
from events.saga_log.port import LoadedSaga, SagaLog, Unit
from saga_core import decide, evolve
from saga_core.approval.totals import (
    WindowCall,
    WindowTotal,
    window_call,
    window_releases,
    windowed,
)
from saga_core.engine.due import next_due
from saga_core.engine.events import (
    ReconciliationScheduled,
    SagaEvent,
    SagaStarted,
    StepScheduled,
    StepStarted,
)
from saga_core.engine.resolved_commands import ResolvedCommand
from saga_core.engine.state import SagaState
from saga_core.errors import ErrorKind, SagaError

log = logging.getLogger(__name__)

__all__ = [
    "Attempt",
    "ClaimAhead",
    "Clock",
    "CommitPlan",
    "Committed",
    "GateWindowsMissing",
    "Orchestrator",
    "RaceLost",
    "WindowLimitReached",
    "commands_due",
    "saga_trace_id",
    "settle",
    "utc_now",
    "wake_ups",
]

MAX_DECISIONS_PER_COMMIT = 64
MAX_RACES = 20


class RaceLost(SagaError):
    """Too many concurrent writers on one saga in a row; the sweeper will come back to it."""

    # Transient: nothing is wrong with the saga, a later attempt succeeds.
    kind = ErrorKind.UNAVAILABLE


class WindowLimitReached(SagaError):
    """Claiming this call would pass its tenant window: nothing was written; the claimer
    records the approval request ``saga_core.engine.decide.ask_over_window`` builds instead."""

    kind = ErrorKind.CONFLICT

    def __init__(self, step_id: str, kind: str, call: WindowCall, total: WindowTotal) -> None:
        self.step_id = step_id
        self.step_kind = kind
        self.call = call
        self.total = total
        super().__init__(f"step {step_id} ({kind}): the tenant window {call.window} holds "
                         f"{total.before} in its period, and {call.amount} more would pass "
                         f"its limit {call.limit}")


@dataclass(frozen=True)
class _WindowWork:
    """A commit's tenant window work: the claims to reserve, the operations to release."""

    calls: list[tuple[StepStarted, WindowCall]]
    releases: list[str]


class GateWindowsMissing(SagaError):
    """A saga whose tools declare tenant windows was committed by an orchestrator built
    without :class:`~application.gate_windows.port.GateWindows` (a wiring mistake: nothing is
    written)."""

    kind = ErrorKind.MISCONFIGURED


def settle(state: SagaState, now: datetime) -> tuple[list[SagaEvent], SagaState]:
    """Ask decide until it has nothing new, folding each decision's event in between."""
    recorded: list[SagaEvent] = []
    for _ in range(MAX_DECISIONS_PER_COMMIT):
        decisions = decide(state, now)
        if not decisions:
            return recorded, state
        for decision in decisions:
            event = decision.to_event(at=now)
            state = evolve(state, event)
            recorded.append(event)
    raise RuntimeError(f"saga {state.saga_id}: decide did not settle; this is a bug in saga_core")


def wake_ups(due: Iterable[tuple[StepCommand, bool]]) -> list[StepCommand]:
    """Of the due ``(command, is_step)`` pairs a commit left unclaimed, those to publish:
    every lookup, and of the steps the first only. The worker that claims it claims its
    due siblings in the same append and runs them side by side, so parallel branches cost
    one broker message, one read and one claim; if it never comes, the sweeper enqueues
    each of them."""
    commands: list[StepCommand] = []
    step_woken = False
    for command, is_step in due:
        if is_step and step_woken:
            continue
        step_woken = step_woken or is_step
        commands.append(command)
    return commands


def _due(
    events: Sequence[SagaEvent], saga_id: str, now: datetime
) -> Iterator[tuple[StepCommand, bool]]:
    """Each due command of ``events`` and whether it is a step (not a lookup)."""
    for event in events:
        if isinstance(event, StepScheduled | ReconciliationScheduled) and event.not_before <= now:
            command = StepCommand(
                saga_id=saga_id, step_id=event.step_id, kind=event.kind, attempt=event.attempt
            )
            yield command, isinstance(event, StepScheduled)


def commands_due(events: Sequence[SagaEvent], saga_id: str, now: datetime) -> list[StepCommand]:
    """Every step command newly recorded events make due: schedules and lookups."""
    return [command for command, _ in _due(events, saga_id, now)]


@dataclass(frozen=True)
class Committed:
    """What one commit appended, and what the caller may publish or run after it."""

    saga_id: str
    events: tuple[SagaEvent, ...]
    loaded: LoadedSaga  # the saga as these events left it (no re-read needed)
    commands: tuple[StepCommand, ...]  # every newly due command not claimed here
    claimed: tuple[StepCommand, ...] = ()  # claimed in this same commit for the committer
    wake_ups: tuple[StepCommand, ...] = ()  # of ``commands``, those worth a message
    resolved: tuple[ResolvedCommand, ...] = ()  # what each of ``claimed`` resolved to

    @property
    def state(self) -> SagaState:
        """The saga's state after the commit."""
        return self.loaded.state


@dataclass(frozen=True)
class CommitPlan:
    """What one commit will append, and at which expected version: a value to write.

    Planned by :meth:`Orchestrator.plan_commit` on the saga as loaded; written by
    :meth:`Orchestrator.write`, which appends ``events`` only if the stream is still at
    ``expected_version`` (the version ``loaded`` was read at).
    """

    loaded: LoadedSaga  # the saga as planned on
    events: tuple[SagaEvent, ...]  # the given events, decide's, then the claims ahead
    state: SagaState  # the saga's state after ``events``
    now: datetime  # the one reading of the clock the plan was made at
    actor: str | None
    due: tuple[StepCommand, ...]  # every newly due command not claimed here
    claimed: tuple[StepCommand, ...]  # claimed ahead, for the committer
    resolved: tuple[ResolvedCommand, ...]  # what each of ``claimed`` resolved to
    wake_ups: tuple[StepCommand, ...]  # of ``due``, those worth a message

    @property
    def saga_id(self) -> str:
        """The saga the plan writes to."""
        return self.loaded.saga_id

    @property
    def expected_version(self) -> int:
        """The append's precondition: the stream is still at the version planned on."""
        return self.loaded.version


class Attempt:
    """One try at writing to a saga, on the saga as read for it (:attr:`loaded`).

    Used as ``with attempt:`` inside ``for attempt in orchestrator.attempts(...)``: a lost
    race (``ConcurrencyError``) inside the block ends this attempt quietly, and the loop reads
    the saga afresh for the next; anything else leaves the block as it came.
    """

    def __init__(self, loaded: LoadedSaga) -> None:
        self.loaded = loaded
        self.race_lost = False

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self.race_lost = isinstance(exc, ConcurrencyError)
        return self.race_lost  # someone else wrote first: swallowed, re-read and re-decide


class Orchestrator:
    """Decides and records for one saga at a time; shared by workers, client and sweeper."""

    def __init__(self, log: SagaLog, clock: Clock = utc_now, *, queue_wait: timedelta,
                 on_race_lost: Callable[[], None] | None = None,
                 windows: GateWindows | None = None) -> None:
        """``queue_wait``: how long a published command normally waits for a worker (work
        is overdue after it: each commit's due time counts it, as the sweeper does);
        ``on_race_lost``: told of every append that met a newer stream version (the
        worker's ``races_lost`` counter); ``windows``: the tenant windows the log's claims
        reserve in (the same database; without it a saga whose tools declare a tenant
        window cannot be committed, :class:`GateWindowsMissing`)."""
        self.log = log
        self.clock = clock
        self.queue_wait = queue_wait
        self.on_race_lost = on_race_lost
        self.windows = windows

    def plan_commit(
        self,
        loaded: LoadedSaga,
        events: Sequence[SagaEvent],
        *,
        claim_ahead: ClaimAhead | None = None,
        actor: str | None = None,
    ) -> CommitPlan:
        """Plan appending ``events``, what decide then schedules and, with ``claim_ahead``,
        the claims of what is due next for that committer, at the loaded version."""
        now = self.clock()
        state = loaded.state
        for event in events:
            state = evolve(state, event)
        decided, state = settle(state, now)
        recorded = [*events, *decided]
        taken = claims_ahead(state, now, claim_ahead) if claim_ahead is not None else []
        for claim in taken:
            state = evolve(state, claim.started)
            recorded.append(claim.started)
        claimed = [claim.command for claim in taken]
        due = [(c, is_step) for c, is_step in _due(recorded, loaded.saga_id, now)
               if c not in claimed]
        # A committer that claims ahead took every due step it could: the rest it left
        # (a call reserved by its own claim, a grant that no longer holds) each need a
        # message. Otherwise a step claimed only by its own claim (it reserves in a tenant
        # window) is woken like a lookup: whoever claims its siblings leaves it.
        alone = {c for c, is_step in due if is_step and windowed(state.definition)
                 and window_call(state, c.step_id, c.kind, now) is not None}
        woken = ([command for command, _ in due] if claim_ahead is not None
                 else wake_ups((c, is_step and c not in alone) for c, is_step in due))
        return CommitPlan(
            loaded=loaded, events=tuple(recorded), state=state, now=now, actor=actor,
            due=tuple(command for command, _ in due), claimed=tuple(claimed),
            resolved=tuple(claim.resolved for claim in taken), wake_ups=tuple(woken),
        )

    def write(self, plan: CommitPlan, *, unit: Unit | None = None) -> Committed:
        """Append what ``plan`` holds at its expected version (inside ``unit`` if given),
        reserving and releasing its tenant window amounts in the same unit.

        Raises ConcurrencyError when another writer got there first (see :meth:`attempts`).
        """
        loaded, state, recorded, now = plan.loaded, plan.state, plan.events, plan.now
        after = loaded
        if recorded:
            windows = self._window_work(loaded.state, state, recorded, now)
            if windows is None:
                appended = self._append(plan, unit=unit)
            elif unit is not None:
                self._reserve(windows, state, now, unit)
                appended = self._append(plan, unit=unit)
            else:
                with self.log.unit_of_work() as own:
                    self._reserve(windows, state, now, own)
                    appended = self._append(plan, unit=own)
            after = loaded.extended(recorded, appended, state)  # folded when planned
        return Committed(loaded.saga_id, recorded, after, plan.due, plan.claimed,
                         plan.wake_ups, plan.resolved)

    def commit(
        self,
        loaded: LoadedSaga,
        events: Sequence[SagaEvent],
        *,
        claim_ahead: ClaimAhead | None = None,
        actor: str | None = None,
        unit: Unit | None = None,
    ) -> Committed:
        """:meth:`plan_commit`, then :meth:`write`: append ``events``, what decide then
        schedules and what ``claim_ahead`` takes, in one append at the loaded version.

        Raises ConcurrencyError when another writer got there first (see :meth:`attempts`).
        """
        return self.write(
            self.plan_commit(loaded, events, claim_ahead=claim_ahead, actor=actor), unit=unit
        )

    def _append(self, plan: CommitPlan, *, unit: Unit | None) -> AppendResult:
        loaded, state = plan.loaded, plan.state
        # The folded state's tenant: a saga's first commit carries its own SagaStarted.
        return self.log.append(
            loaded.saga_id, state.tenant or loaded.tenant, plan.events, plan.expected_version,
            actor=plan.actor, unit=unit, trace_id=saga_trace_id(loaded, plan.events),
            # Settled at plan.now: decide had nothing more, and the claims ahead leave it so.
            due_at=next_due(state, self.queue_wait, after=plan.now, decided=()),
        )

    @staticmethod
    def _window_work(before: SagaState, state: SagaState, recorded: Sequence[SagaEvent],
                     now: datetime) -> _WindowWork | None:
        """What the commit reserves in and releases from tenant windows (None: nothing)."""
        if not windowed(state.definition):
            return None
        calls = [(event, call) for event in recorded if isinstance(event, StepStarted)
                 and (call := window_call(state, event.step_id, event.kind, now)) is not None]
        releases = window_releases(before, state)
        return _WindowWork(calls, releases) if calls or releases else None

    def _reserve(self, work: _WindowWork, state: SagaState, now: datetime, unit: Unit) -> None:
        """Reserve the commit's claims and release what it settled, inside ``unit``;
        WindowLimitReached (the unit then writes nothing) when a claim does not fit."""
        if self.windows is None:
            raise GateWindowsMissing(f"saga {state.saga_id}: its tools declare tenant windows, "
                                     "but this orchestrator has no GateWindows")
        for started, call in work.calls:
            total = self.windows.reserve(state.tenant, call, now, unit)
            if not total.reserved:
                raise WindowLimitReached(started.step_id, str(started.kind), call, total)
        if work.releases:
            self.windows.release(state.tenant, work.releases, now, unit)

    def attempts(self, saga_id: str, *, known: LoadedSaga | None = None) -> Iterator[Attempt]:
        """The one retry loop: an :class:`Attempt` on the saga as read, and after each lost
        race one more on a fresh read; it ends after the first attempt that lost no race.

        ``known`` is a state the caller already holds: it is tried first, saving a read when
        no one raced. RaceLost after MAX_RACES lost races in a row.
        """
        for _ in range(MAX_RACES):
            attempt = Attempt(known or self.log.load(saga_id))
            known = None
            yield attempt
            if not attempt.race_lost:
                return
            if self.on_race_lost is not None:
                self.on_race_lost()
        raise RaceLost(f"saga {saga_id}: lost {MAX_RACES} races in a row")

    def advance(self, saga_id: str, *, known: LoadedSaga | None = None) -> Committed:
        """Record whatever decide says is due for this saga now (expired leases and
        approvals, a backoff that ended)."""
        for attempt in self.attempts(saga_id, known=known):
            with attempt:
                committed = self.commit(attempt.loaded, ())
        return committed


def saga_trace_id(loaded: LoadedSaga, events: Sequence[SagaEvent]) -> str | None:
    """The saga's lineage trace id, from its SagaStarted (already loaded, or among the
    events of its first commit); None for a saga started without lineage."""
    first = loaded.started or (events[0] if events else None)
    if isinstance(first, SagaStarted) and first.lineage is not None:
        return first.lineage.trace_id
    return None
