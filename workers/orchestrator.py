"""The orchestrator's write side: fold a saga, let saga_core decide, append, then publish.

Every change goes through :meth:`Orchestrator.commit`: the events are appended at the
stream version they were decided on (optimistic concurrency), and only after the commit
are the resulting step commands published. A lost race re-reads and re-decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from events import ConcurrencyError, UnitOfWork
from events.sagas import LoadedSaga, SagaRepository
from saga_core import decide, evolve
from saga_core.events import (
    ReconciliationScheduled,
    SagaEvent,
    StepScheduled,
)
from saga_core.state import SagaState
from workers.messages import StepCommand
from workers.publisher import Publisher

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
#: Given the state after a commit's decisions and ``now``: the commands to claim in the same
#: commit, each with its StepStarted event (empty: none).
ClaimNext = Callable[[SagaState, datetime], "list[tuple[StepCommand, SagaEvent]]"]
MAX_DECISIONS_PER_COMMIT = 64
MAX_RACES = 20


def utc_now() -> datetime:
    """The fleet's clock: aware UTC (saga_core never reads one itself)."""
    return datetime.now(UTC)


class RaceLost(RuntimeError):
    """Too many concurrent writers on one saga in a row; the sweeper will come back to it."""


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
    """What one commit appended and which commands it published."""

    saga_id: str
    events: tuple[SagaEvent, ...]
    loaded: LoadedSaga
    commands: tuple[StepCommand, ...]  # every newly due command not claimed here
    claimed: tuple[StepCommand, ...] = ()  # claimed in this same commit by the committer
    wake_ups: tuple[StepCommand, ...] = ()  # of ``commands``, those worth a message

    @property
    def state(self) -> SagaState:
        """The saga's state after the commit."""
        return self.loaded.state


class Orchestrator:
    """Decides and records for one saga at a time; shared by workers, client and sweeper."""

    def __init__(self, repo: SagaRepository, publisher: Publisher, clock: Clock = utc_now) -> None:
        self.repo = repo
        self.publisher = publisher
        self.clock = clock

    def commit(
        self,
        loaded: LoadedSaga,
        events: Sequence[SagaEvent],
        *,
        actor: str | None = None,
        publish: bool = True,
        claim_next: ClaimNext | None = None,
        unit: UnitOfWork | None = None,
    ) -> Committed:
        """Append ``events`` plus whatever decide then schedules, at the loaded version.

        With ``unit`` the append joins the caller's unit of work; the caller publishes
        ``Committed.commands`` after its commit (``publish`` must then be False).

        With ``claim_next``, the committer may claim the steps now due in the same
        transaction (their StepStarted events ride along), so a worker continuing with a
        saga saves a commit and a message per step; claimed commands are not published.
        Only ``Committed.wake_ups`` are published (see :func:`wake_ups`).
        Raises ConcurrencyError when another writer got there first; callers re-read.
        """
        if unit is not None and publish:
            raise ValueError("publish after the caller's commit, not inside its transaction")
        now = self.clock()
        state = loaded.state
        for event in events:
            state = evolve(state, event)
        decided, state = settle(state, now)
        recorded = [*events, *decided]
        claimed: list[StepCommand] = []
        if claim_next is not None:
            for command, started in claim_next(state, now):
                state = evolve(state, started)
                recorded.append(started)
                claimed.append(command)
        due = [(c, is_step) for c, is_step in _due(recorded, loaded.saga_id, now)
               if c not in claimed]
        commands = [command for command, _ in due]
        woken = wake_ups(due)
        after = loaded
        if recorded:
            # The folded state's tenant: a saga's first commit carries its own SagaStarted.
            appended = self.repo.append(
                loaded.saga_id, state.tenant or loaded.tenant, recorded, loaded.version,
                actor=actor, unit=unit,
            )
            after = loaded.extended(recorded, appended, state)  # folded above
        if publish and woken:
            self.publisher.publish(woken)
        return Committed(loaded.saga_id, tuple(recorded), after, tuple(commands),
                         tuple(claimed), tuple(woken))

    def advance(self, saga_id: str) -> Committed:
        """Record whatever decide says is due for this saga now (sweeper, after an answer)."""
        for _ in range(MAX_RACES):
            loaded = self.repo.load(saga_id)
            try:
                return self.commit(loaded, [])
            except ConcurrencyError:
                continue
        raise RaceLost(f"saga {saga_id}: lost {MAX_RACES} races in a row")

    def record_with_retry(
        self,
        saga_id: str,
        build: Callable[[LoadedSaga], Sequence[SagaEvent] | None],
        *,
        actor: str | None = None,
        publish: bool = True,
        known: LoadedSaga | None = None,
        claim_next: ClaimNext | None = None,
    ) -> Committed | None:
        """Re-read, rebuild and append until no other writer interferes.

        ``build`` gets the freshly loaded saga and returns the events to record, or None
        when, given the current log, there is nothing to record any more. ``known`` is a
        state the caller already holds: it is tried first, saving a read when no one raced.
        """
        for _ in range(MAX_RACES):
            loaded = known or self.repo.load(saga_id)
            known = None
            events = build(loaded)
            if events is None:
                return None
            try:
                return self.commit(loaded, events, actor=actor, publish=publish,
                                   claim_next=claim_next)
            except ConcurrencyError:
                continue
        raise RaceLost(f"saga {saga_id}: lost {MAX_RACES} races in a row")

