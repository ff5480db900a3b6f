"""Where a saga event is written: fold, let saga_core decide, claim, append once.

Every append to a saga stream — a claim, a result, a lookup's answer, an operator action,
a start, the sweeper's decision — is one call of :meth:`Orchestrator.commit`:

1. fold the given events into the loaded state, then ask ``decide`` until it settles
   (:func:`settle`), each decision recorded as an event;
2. with ``claim`` (what the committer will run next), claim the steps now due for it:
   their ``StepStarted`` events ride in the same append, so a worker continuing a saga
   saves a commit and a broker message per step;
3. append everything at the version the saga was loaded at (``ConcurrencyError`` when
   another writer got there first) through the :class:`~events.saga_log.port.SagaLog`,
   optionally inside the caller's unit of work, with the saga's next due time
   (``saga_core.engine.due.next_due``: when the sweeper should look at it again, if ever); a
   claim of a call whose gate has a tenant window reserves its amount in the same unit
   (:class:`~application.gate_windows.port.GateWindows`; :class:`WindowLimitReached`, nothing
   written,
   when it would pass the window), and a call that turned out to have had no effect
   releases its reservation in the same unit (``saga_core.approval.totals``);
4. return :class:`Committed`: the events, the saga as they left it, the commands they
   made due, those claimed, and the ``wake_ups`` worth a broker message.

Nothing is published here: the caller publishes ``Committed.wake_ups`` after its own
transaction commits (intent before effect, message after commit). A lost race is
retried in exactly one place, :meth:`Orchestrator.retrying`: re-read, rebuild, commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from application.gate_windows.port import GateWindows
from application.messages import StepCommand
from events import ConcurrencyError
from events.eventstore.model import AppendResult
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
from saga_core.engine.state import SagaState
from saga_core.errors import ErrorKind, SagaError

log = logging.getLogger(__name__)

T = TypeVar("T")
Clock = Callable[[], datetime]
#: What to claim next: given the state after a commit's decisions and ``now``, the due
#: commands the committer will run itself, each with the StepStarted that claims it.
ClaimNext = Callable[[SagaState, datetime], "list[tuple[StepCommand, StepStarted]]"]
#: Given the freshly loaded saga: the events to record, or None when there is nothing to
#: record any more (someone else settled it meanwhile).
Build = Callable[[LoadedSaga], "Sequence[SagaEvent] | None"]
MAX_DECISIONS_PER_COMMIT = 64
MAX_RACES = 20


def utc_now() -> datetime:
    """The fleet's clock: aware UTC (saga_core never reads one itself)."""
    return datetime.now(UTC)


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

    @property
    def state(self) -> SagaState:
        """The saga's state after the commit."""
        return self.loaded.state


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

    def commit(
        self,
        loaded: LoadedSaga,
        events: Sequence[SagaEvent],
        *,
        claim: ClaimNext | None = None,
        actor: str | None = None,
        unit: Unit | None = None,
    ) -> Committed:
        """Append ``events``, what decide then schedules and what ``claim`` takes, in one
        append at the loaded version (inside ``unit`` if given).

        Raises ConcurrencyError when another writer got there first; see :meth:`retrying`.
        """
        now = self.clock()
        state = loaded.state
        for event in events:
            state = evolve(state, event)
        decided, state = settle(state, now)
        recorded = [*events, *decided]
        claimed: list[StepCommand] = []
        if claim is not None:
            for command, started in claim(state, now):
                state = evolve(state, started)
                recorded.append(started)
                claimed.append(command)
        due = [(c, is_step) for c, is_step in _due(recorded, loaded.saga_id, now)
               if c not in claimed]
        after = loaded
        if recorded:
            windows = self._window_work(loaded.state, state, recorded, now)
            if windows is None:
                appended = self._append(loaded, state, recorded, now, actor=actor, unit=unit)
            elif unit is not None:
                self._reserve(windows, state, now, unit)
                appended = self._append(loaded, state, recorded, now, actor=actor, unit=unit)
            else:
                with self.log.unit_of_work() as own:
                    self._reserve(windows, state, now, own)
                    appended = self._append(loaded, state, recorded, now, actor=actor, unit=own)
            after = loaded.extended(recorded, appended, state)  # folded above
        # A committer that claims ahead took every due step it could: the rest it left
        # (a call reserved by its own claim, a grant that no longer holds) each need a
        # message. Otherwise a step claimed only by its own claim (it reserves in a tenant
        # window) is woken like a lookup: whoever claims its siblings leaves it.
        alone = {c for c, is_step in due if is_step and windowed(state.definition)
                 and window_call(state, c.step_id, c.kind, now) is not None}
        woken = ([command for command, _ in due] if claim is not None
                 else wake_ups((c, is_step and c not in alone) for c, is_step in due))
        return Committed(loaded.saga_id, tuple(recorded), after,
                         tuple(command for command, _ in due), tuple(claimed), tuple(woken))

    def _append(self, loaded: LoadedSaga, state: SagaState, recorded: Sequence[SagaEvent],
                now: datetime, *, actor: str | None, unit: Unit | None) -> AppendResult:
        # The folded state's tenant: a saga's first commit carries its own SagaStarted.
        return self.log.append(
            loaded.saga_id, state.tenant or loaded.tenant, recorded, loaded.version,
            actor=actor, unit=unit, trace_id=saga_trace_id(loaded, recorded),
            due_at=next_due(state, self.queue_wait, after=now),
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

    def retrying(
        self, saga_id: str, attempt: Callable[[LoadedSaga], T], *, known: LoadedSaga | None = None
    ) -> T:
        """Run ``attempt`` (which commits) on the saga, re-reading it after each lost race.

        ``known`` is a state the caller already holds: it is tried first, saving a read when
        no one raced. RaceLost after MAX_RACES lost races in a row.
        """
        for _ in range(MAX_RACES):
            loaded = known or self.log.load(saga_id)
            known = None
            try:
                return attempt(loaded)
            except ConcurrencyError:
                if self.on_race_lost is not None:
                    self.on_race_lost()
                continue  # someone else wrote first: re-read and re-decide
        raise RaceLost(f"saga {saga_id}: lost {MAX_RACES} races in a row")

    def record(
        self,
        saga_id: str,
        build: Build,
        *,
        known: LoadedSaga | None = None,
        claim: ClaimNext | None = None,
        actor: str | None = None,
    ) -> Committed | None:
        """Commit what ``build`` makes of the current saga, rebuilt after each lost race;
        None when ``build`` finds nothing to record."""

        def attempt(loaded: LoadedSaga) -> Committed | None:
            events = build(loaded)
            if events is None:
                return None
            return self.commit(loaded, events, claim=claim, actor=actor)

        return self.retrying(saga_id, attempt, known=known)

    def advance(self, saga_id: str, *, known: LoadedSaga | None = None) -> Committed:
        """Record whatever decide says is due for this saga now (expired leases and
        approvals, a backoff that ended)."""
        return self.retrying(saga_id, lambda loaded: self.commit(loaded, ()), known=known)


def saga_trace_id(loaded: LoadedSaga, events: Sequence[SagaEvent]) -> str | None:
    """The saga's lineage trace id, from its SagaStarted (already loaded, or among the
    events of its first commit); None for a saga started without lineage."""
    first = loaded.started or (events[0] if events else None)
    if isinstance(first, SagaStarted) and first.lineage is not None:
        return first.lineage.trace_id
    return None
