"""The saga log port: the one contract the saga engine reads and writes sagas through.

Two adapters sit beside it: :mod:`events.saga_log.postgres` (``PostgresSagaLog``) and
:mod:`events.saga_log.memory` (``MemorySagaLog``, what ``sagafleet.testing`` runs users' tests
on). One contract suite (``tests/contract``) runs against both, so the in-memory log is a
product held to the same promises, not a mock.

**SagaLog** — load one saga (from its snapshot, :mod:`events.saga_log.snapshots`, when one
checks out), load its whole history, load many, drop every snapshot, append events at an
expected version (optimistic: ``ConcurrencyError`` when another writer got there first;
idempotent by event id), optionally inside a :class:`Unit` of work; watch for appends
(:class:`Changes`, a wake-up, never the truth). Each saga has a due time, set by the append
that moves it (kept unless given) or by :meth:`SagaLog.defer` while the saga is still at a
version: :meth:`SagaLog.due` finds the sagas due by a time, without reading the others.

A :class:`Unit` is opaque to callers: whatever is written with it (appends, and the side
writes of the other ports: definitions, secrets, gate windows) commits together on a clean
exit of ``SagaLog.unit_of_work()`` and not at all on an exception. A conflict may surface at
an append inside the unit or, when another writer committed the same stream first, as the
block ends (the in-memory log; PostgreSQL makes that writer wait instead): either way it is
``ConcurrencyError`` and nothing of the unit is written. Each implementation refuses
another's unit (``InvalidArgument``, see :func:`unit_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol, TypeVar

from events.errors import InvalidArgument
from events.eventstore.model import (
    KEEP_DUE,
    AppendResult,
    DueTime,
    ExpectedVersion,
    Position,
    RecordedEvent,
)
from saga_core import SagaDefinition, evolve
from saga_core.engine.events import SagaEvent, SagaStarted
from saga_core.engine.state import SagaState
from saga_core.errors import SagaError


class Unit(Protocol):
    """One open unit of work; appends and side writes made with it commit together."""


U = TypeVar("U")


def unit_of(kind: type[U], unit: Unit) -> U:
    """``unit`` as the concrete unit an implementation writes with, or InvalidArgument for
    another implementation's unit (its writes would not commit together with this one's)."""
    if not isinstance(unit, kind):
        raise InvalidArgument(
            f"a {type(unit).__name__} is not a unit of work here: pass the unit that "
            f"this log's unit_of_work() opened (a {kind.__name__})"
        )
    return unit


class DueSaga(NamedTuple):
    """A saga's due time at a stream version: what :meth:`SagaLog.due` finds, and what
    :meth:`SagaLog.defer` sets (None clears it) while the saga is still at that version."""

    saga_id: str
    version: int
    due_at: datetime | None


class Changes(Protocol):
    """A wake-up on appends to the log, opened before the first look (so none is missed)."""

    def wait(self, timeout: float) -> bool:
        """Block until something was appended or ``timeout`` seconds pass; True if woken.

        A wake-up only says "look again" (it may be another saga's append), and silence
        proves nothing (PostgreSQL's NOTIFY can be off): callers re-check on a slow
        interval too.
        """
        ...


class SagaLog(Protocol):
    """Where sagas live: fold one or many from their streams, append at a version."""

    def load(
        self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
    ) -> LoadedSaga:
        """Fold a saga (up to ``at``); ``SagaNotFound`` if absent or another tenant's."""
        ...

    def load_history(
        self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
    ) -> SagaHistory:
        """Fold every event of a saga (up to ``at``), keeping them: what a trace, an audit
        or a repeated click's check reads; ``SagaNotFound`` as :meth:`load`."""
        ...

    def load_many(self, saga_ids: Sequence[str]) -> dict[str, LoadedSaga | SagaError]:
        """Each id to its folded saga, or to the error loading it alone would raise."""
        ...

    def drop_snapshots(self) -> int:
        """Forget every snapshot of saga state (never the truth: loads fold whole streams
        until new ones are written); return how many there were."""
        ...

    def append(
        self,
        saga_id: str,
        tenant: str,
        events: Sequence[SagaEvent],
        expected_version: ExpectedVersion,
        *,
        actor: str | None = None,
        unit: Unit | None = None,
        trace_id: str | None = None,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append at ``expected_version`` (``ConcurrencyError`` if the stream moved);
        ``trace_id``: the saga's lineage trace, put in each event's metadata; ``due_at``:
        the saga's next due time (None: none; by default it stays as it was)."""
        ...

    def due(self, now: datetime, limit: int, *, since: datetime | None = None) -> list[DueSaga]:
        """The sagas due by ``now`` (and, with ``since``, after it), the longest due first
        (at most ``limit``)."""
        ...

    def defer(self, items: Sequence[DueSaga]) -> int:
        """Set each saga's due time (None clears it) only while it is still at the item's
        version (an append in between wins); how many were set."""
        ...

    def unit_of_work(self) -> AbstractContextManager[Unit]:
        """A unit of work: commit on clean exit, nothing at all on an exception."""
        ...

    def watch(self) -> AbstractContextManager[Changes]:
        """Wake-ups on appends, held open for the block (how ``SagaClient.wait`` sleeps)."""
        ...


@dataclass(frozen=True)
class LoadedSaga:
    """A saga folded from its log (from a snapshot on, when one checks out): definition,
    state, its ``SagaStarted`` and the stream version.

    It holds no history: a load from a snapshot reads only the events after it. What needs
    every event asks for it (:meth:`SagaStreams.load_history`, a :class:`SagaHistory`).
    """

    saga_id: str
    definition: SagaDefinition
    state: SagaState
    started: SagaStarted | None  # None only before the saga's first append
    version: int  # the stream version the state reflects (the next append's expected one)

    @property
    def tenant(self) -> str:
        """The tenant the saga belongs to."""
        return self.state.tenant

    def extended(
        self, events: Sequence[SagaEvent], appended: AppendResult,
        state: SagaState | None = None,
    ) -> LoadedSaga:
        """This saga after ``events`` were appended (as ``appended``), without re-reading.

        ``state``: the state after ``events``, when the caller folded them already.
        """
        if state is None:
            state = self.state
            for event in events:
                state = evolve(state, event)
        started = self.started or next((e for e in events if isinstance(e, SagaStarted)), None)
        # state.definition: a plan revision changes the definition the saga runs
        return LoadedSaga(self.saga_id, state.definition, state, started, appended.version)


@dataclass(frozen=True)
class SagaHistory(LoadedSaga):
    """A saga folded from every event of its stream, with those events and their records
    (a trace, an audit, the readable history, a repeated click's check)."""

    events: tuple[SagaEvent, ...]
    records: tuple[RecordedEvent, ...]
