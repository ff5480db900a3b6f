"""Saga streams: the registry of saga event types, the codec every SagaLog folds with, and
the PostgreSQL SagaLog (the in-memory one is ``events.memory.MemorySagaLog``).

A saga lives in the stream ``saga-<id>``; its first event, ``SagaStarted``, names the
definition by hash, so any process can fold the stream back into state without the
process or the model that started it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from events.definitions import DefinitionStore
from events.errors import EventStoreError
from events.model import (
    KEEP_DUE,
    AppendResult,
    DueStream,
    DueTime,
    ExpectedVersion,
    NewEvent,
    Position,
    RecordedEvent,
)
from events.registry import EventRegistry
from events.saga_log import Definitions, DueSaga, SagaLog, Unit, unit_of
from events.store import EventStore, UnitOfWork
from events.subscription import Notifications
from events.traces import SAGA_TRACE_KEY
from saga_core import SagaDefinition, evolve
from saga_core.errors import ErrorKind, SagaError
from saga_core.events import SAGA_EVENT_TYPES, SagaEvent, SagaStarted
from saga_core.state import SagaState

STREAM_PREFIX = "saga-"


#: What an appending process adds to each event's metadata (a worker's trace ids).
MetadataSource = Callable[[], Mapping[str, str]]


class SagaNotFound(EventStoreError):
    """No saga with that id exists (for this tenant)."""
    kind = ErrorKind.NOT_FOUND


class CorruptSagaStream(EventStoreError):
    """A saga stream does not start with SagaStarted or holds an event it cannot decode."""
    kind = ErrorKind.INTEGRITY


def saga_stream(saga_id: str) -> str:
    """The stream id of a saga."""
    return STREAM_PREFIX + saga_id


def saga_id_of(stream_id: str) -> str | None:
    """The saga id of a saga stream, or None for any other stream."""
    return stream_id[len(STREAM_PREFIX) :] if stream_id.startswith(STREAM_PREFIX) else None


def saga_registry() -> EventRegistry:
    """An event registry holding every saga event type at its schema version."""
    registry = EventRegistry()
    for name, model in SAGA_EVENT_TYPES.items():
        registry.register(model, name, model.schema_version)
    return registry


@dataclass(frozen=True)
class LoadedSaga:
    """A saga folded from its log: definition, state, the events and the stream version."""

    saga_id: str
    definition: SagaDefinition
    state: SagaState
    events: tuple[SagaEvent, ...]
    records: tuple[RecordedEvent, ...]

    @property
    def version(self) -> int:
        """The stream version the state reflects (the expected version of the next append)."""
        return self.records[-1].stream_version if self.records else 0

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
        return LoadedSaga(
            self.saga_id,
            state.definition,  # a plan revision changes the definition the saga runs
            state,
            (*self.events, *events),
            (*self.records, *appended.events),
        )


class SagaCodec:
    """Saga events to and from a log's envelopes, shared by every SagaLog implementation:
    the metadata an append adds, and the fold (with its errors) a load performs."""

    def __init__(self, registry: EventRegistry, definitions: Definitions, *,
                 metadata: MetadataSource | None = None) -> None:
        """``metadata``: asked at each append for more metadata of the appending process
        (a worker's trace ids, ``workers.tracing.trace_metadata``)."""
        self.registry = registry
        self.definitions = definitions
        self.metadata = metadata

    def new_events(
        self, events: Sequence[SagaEvent], tenant: str, actor: str | None, *,
        trace_id: str | None = None,
    ) -> list[NewEvent]:
        """The envelopes of ``events``, carrying the tenant (and the actor and the saga's
        lineage trace id, when known)."""
        metadata: dict[str, Any] = dict(self.metadata()) if self.metadata is not None else {}
        metadata["tenant"] = tenant
        if actor:
            metadata["actor"] = actor
        if trace_id:
            metadata[SAGA_TRACE_KEY] = trace_id
        return [self.registry.to_new_event(e, metadata=metadata) for e in events]

    def fold(
        self, saga_id: str, records: Sequence[RecordedEvent], *, tenant: str | None = None
    ) -> LoadedSaga:
        """Fold the records of one saga stream; SagaNotFound if there are none (or they are
        another tenant's), CorruptSagaStream if they do not decode into a saga."""
        if not records:
            raise SagaNotFound(f"no saga {saga_id!r}")
        events = [self._decode(r) for r in records]
        started = events[0]
        if not isinstance(started, SagaStarted):
            raise CorruptSagaStream(f"saga {saga_id!r} does not start with SagaStarted")
        if tenant is not None and started.tenant != tenant:
            # Another tenant's saga is indistinguishable from a missing one.
            raise SagaNotFound(f"no saga {saga_id!r}")
        definition = self.definitions.by_hash(started.definition_hash)
        state = SagaState.initial(definition)
        for event in events:
            state = evolve(state, event)
        # state.definition: the started one, or the latest plan revision's (PlanRevised).
        return LoadedSaga(saga_id, state.definition, state, tuple(events), tuple(records))

    def fold_each(
        self, streams: Mapping[str, str], records: Mapping[str, Sequence[RecordedEvent]]
    ) -> dict[str, LoadedSaga | SagaError]:
        """For ``streams`` (stream id -> saga id) read as ``records``: each saga id to its
        folded saga, or to the error that loading it alone would raise."""
        loaded: dict[str, LoadedSaga | SagaError] = {}
        for stream_id, saga_id in streams.items():
            try:
                loaded[saga_id] = self.fold(saga_id, records[stream_id])
            except SagaError as exc:
                loaded[saga_id] = exc
        return loaded

    def _decode(self, record: RecordedEvent) -> SagaEvent:
        try:
            event = self.registry.decode(record)
        except EventStoreError as exc:
            raise CorruptSagaStream(f"{record.stream_id}@{record.stream_version}: {exc}") from exc
        if not isinstance(event, SagaEvent):
            raise CorruptSagaStream(
                f"{record.stream_id}@{record.stream_version} is not a saga event"
            )
        return event


def at_or_before(records: list[RecordedEvent], at: Position | None) -> list[RecordedEvent]:
    """The records a load ``at`` a position sees (all of them when ``at`` is None)."""
    return records if at is None else [r for r in records if r.position <= at]


class EventStreams(Protocol):
    """What a saga log needs of an event store (the PostgreSQL one or the in-memory one)."""

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        """A stream's events in version order."""
        ...

    def read_streams(self, stream_ids: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several whole streams: each id to its events."""
        ...

    def append(
        self, stream_id: str, events: Sequence[NewEvent], expected_version: ExpectedVersion,
        *, due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append at ``expected_version`` (setting the head's due time, when given)."""
        ...

    def due_streams(self, prefix: str, now: datetime, limit: int) -> list[DueStream]:
        """The streams of ``prefix`` due by ``now``, the longest due first."""
        ...

    def defer_due(self, items: Sequence[DueStream]) -> int:
        """Set due times of heads still at the items' versions."""
        ...


class Appender(Protocol):
    """A unit of work's own append (it commits, or not, with the rest of the unit)."""

    def append(
        self, stream_id: str, events: Sequence[NewEvent], expected_version: ExpectedVersion,
        *, due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append inside the unit at ``expected_version``."""
        ...


class SagaStreams(ABC):
    """What every :class:`~events.saga_log.SagaLog` shares: sagas folded from a store's
    ``saga-<id>`` streams and appended with tenant (and actor) metadata. A log says only
    what its unit of work is (:meth:`unit_of_work`, :meth:`_within`)."""

    def __init__(self, store: EventStreams, codec: SagaCodec) -> None:
        self.streams = store
        self.codec = codec

    def load(
        self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
    ) -> LoadedSaga:
        """Fold a saga's stream (up to ``at`` if given); SagaNotFound if absent or not visible."""
        records = at_or_before(self.streams.read_stream(saga_stream(saga_id)), at)
        return self.codec.fold(saga_id, records, tenant=tenant)

    def load_many(self, saga_ids: Sequence[str]) -> dict[str, LoadedSaga | SagaError]:
        """Fold several sagas read in one query: each id to its saga, or to the error that
        loading it alone would raise (SagaNotFound, CorruptSagaStream, ...)."""
        streams = {saga_stream(saga_id): saga_id for saga_id in saga_ids}
        return self.codec.fold_each(streams, self.streams.read_streams(list(streams)))

    def fold_records(
        self, saga_id: str, records: Sequence[RecordedEvent], *, tenant: str | None = None
    ) -> LoadedSaga:
        """Fold already-read records of one saga stream into a LoadedSaga."""
        return self.codec.fold(saga_id, records, tenant=tenant)

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
        """Append saga events with tenant (and actor, and the saga's lineage trace id as
        ``saga_trace_id``) metadata at ``expected_version``; with ``unit`` the append
        commits (or not) with the rest of that unit of work. ``due_at``: the saga's next
        due time, set with the append (None clears it; by default it stays)."""
        new = self.codec.new_events(events, tenant, actor, trace_id=trace_id)
        target = self.streams if unit is None else self._within(unit)
        return target.append(saga_stream(saga_id), new, expected_version, due_at=due_at)

    def due(self, now: datetime, limit: int) -> list[DueSaga]:
        """The sagas due by ``now``, the longest due first (at most ``limit``)."""
        found = self.streams.due_streams(STREAM_PREFIX, now, limit)
        return [DueSaga(s.stream_id[len(STREAM_PREFIX):], s.version, s.due_at) for s in found]

    def defer(self, items: Sequence[DueSaga]) -> int:
        """Set each saga's due time while it is still at the item's version (one write)."""
        return self.streams.defer_due(
            [DueStream(saga_stream(i.saga_id), i.version, i.due_at) for i in items])

    @abstractmethod
    def _within(self, unit: Unit) -> Appender:
        """This log's own unit of work behind ``unit`` (InvalidArgument for another's)."""


class PostgresSagaLog(SagaStreams):
    """The PostgreSQL :class:`~events.saga_log.SagaLog`: sagas folded from an EventStore."""

    def __init__(self, store: EventStore, definitions: DefinitionStore, *,
                 metadata: MetadataSource | None = None) -> None:
        """``metadata``: more metadata for every append (see :class:`SagaCodec`)."""
        if store.registry is None:
            raise EventStoreError("a PostgresSagaLog needs a store opened with saga_registry()")
        super().__init__(store, SagaCodec(store.registry, definitions, metadata=metadata))
        self.store = store
        self.definitions = definitions
        self.registry = store.registry

    def _within(self, unit: Unit) -> UnitOfWork:
        return unit_of(UnitOfWork, unit)

    def unit_of_work(self) -> AbstractContextManager[UnitOfWork]:
        """A pipelined transaction: appends, secrets and definition checks commit together."""
        return self.store.transaction(pipelined=True)

    def watch(self) -> Notifications:
        """The store's NOTIFYs on a dedicated connection of its own (closed with the block)."""
        return Notifications(self.store)

if TYPE_CHECKING:  # mypy checks that each class keeps its port's signatures

    def _conforms(
        log: PostgresSagaLog, definitions: DefinitionStore
    ) -> tuple[SagaLog, Definitions]:
        return log, definitions
