"""Saga streams: the registry of saga event types, the codec every SagaLog folds with, and
``SagaStreams``, what both adapters (:mod:`events.saga_log.postgres`,
:mod:`events.saga_log.memory`) share.

A saga lives in the stream ``saga-<id>``; its first event, ``SagaStarted``, names the
definition by hash, so any process can fold the stream back into state without the
process or the model that started it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from events.definition_store.port import Definitions
from events.errors import EventStoreError
from events.eventstore.model import (
    KEEP_DUE,
    AppendResult,
    DueStream,
    DueTime,
    ExpectedVersion,
    NewEvent,
    Position,
    RecordedEvent,
)
from events.eventstore.registry import EventRegistry
from events.eventstore.traces import SAGA_TRACE_KEY
from events.saga_log.port import DueSaga, LoadedSaga, SagaHistory, Unit
from events.saga_log.snapshots import SnapshotRead, Snapshots, StoredSnapshot, snapshot_problem
from saga_core import evolve
from saga_core.engine.events import SAGA_EVENT_TYPES, SagaEvent, SagaStarted
from saga_core.engine.state import SagaState
from saga_core.engine.state_codec import (
    DEFAULT_SNAPSHOT_EVERY,
    SnapshotUnreadable,
    decode_state,
    encode_state,
)
from saga_core.engine.state_codec import SCHEMA as SNAPSHOT_SCHEMA
from saga_core.errors import ErrorKind, SagaError

STREAM_PREFIX = "saga-"


log = logging.getLogger(__name__)


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






class SagaCodec:
    """Saga events to and from a log's envelopes, shared by every SagaLog implementation:
    the metadata an append adds, and the fold (with its errors) a load performs."""

    def __init__(self, registry: EventRegistry, definitions: Definitions, *,
                 metadata: MetadataSource | None = None) -> None:
        """``metadata``: asked at each append for more metadata of the appending process
        (a worker's trace ids, ``application.telemetry.tracing.trace_metadata``)."""
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
    ) -> SagaHistory:
        """Fold the records of one whole saga stream; SagaNotFound if there are none (or they
        are another tenant's), CorruptSagaStream if they do not decode into a saga."""
        if not records:
            raise SagaNotFound(f"no saga {saga_id!r}")
        events = [self._decode(r) for r in records]
        started = self._started(saga_id, events[0], tenant)
        definition = self.definitions.by_hash(started.definition_hash)
        state = SagaState.initial(definition)
        for event in events:
            state = evolve(state, event)
        # state.definition: the started one, or the latest plan revision's (PlanRevised).
        return SagaHistory(saga_id, state.definition, state, started,
                           records[-1].stream_version, tuple(events), tuple(records))

    def fold_from_snapshot(
        self, saga_id: str, read: SnapshotRead, *, tenant: str | None = None
    ) -> LoadedSaga | None:
        """Fold the events after a snapshot onto it; None if the snapshot does not check out
        (its seal does not hold, another definition, not at its version, unreadable: fold
        the whole stream). SagaNotFound and CorruptSagaStream as :meth:`fold`."""
        snapshot = read.snapshot
        if snapshot is None or not read.records:
            return None
        started = self._started(saga_id, self._decode(read.records[0]), tenant)
        at_version = next(
            (r for r in read.records if r.stream_version == snapshot.version), None)
        problem = snapshot_problem(snapshot, at_version)
        if problem is not None:
            # Never by itself (a load writes a sealed snapshot of what it folded): tampering,
            # or a log rewritten under it. The log decides; verify names the saga.
            log.warning("refusing the snapshot of saga %s at %d: %s; folding its log",
                        saga_id, snapshot.version, problem)
            return None
        if snapshot.definition_hash != started.definition_hash:
            return None
        try:
            state = decode_state(snapshot.state, self.definitions.by_hash(snapshot.definition_hash))
        except SnapshotUnreadable as exc:
            log.warning("ignoring the snapshot of %s at %d: %s", saga_id, snapshot.version, exc)
            return None
        if state.version != snapshot.version:
            return None
        for record in read.after_snapshot():
            state = evolve(state, self._decode(record))
        head = read.records[-1].stream_version
        return LoadedSaga(saga_id, state.definition, state, started, head)

    def snapshot_of(self, loaded: LoadedSaga, head: RecordedEvent) -> StoredSnapshot | None:
        """A snapshot of a loaded saga taken at ``head``, its last folded event; None
        for a state whose definition a reader could not find by hash (a plan revision's,
        carried by its PlanRevised event alone)."""
        started = loaded.started
        if started is None or loaded.definition.content_hash() != started.definition_hash:
            return None
        return StoredSnapshot(saga_stream(loaded.saga_id), loaded.version,
                              started.definition_hash, encode_state(loaded.state),
                              head.event_hash)

    @staticmethod
    def _started(saga_id: str, first: SagaEvent, tenant: str | None) -> SagaStarted:
        """A stream's first event as its SagaStarted, visible to ``tenant`` (if given)."""
        if not isinstance(first, SagaStarted):
            raise CorruptSagaStream(f"saga {saga_id!r} does not start with SagaStarted")
        if tenant is not None and first.tenant != tenant:
            # Another tenant's saga is indistinguishable from a missing one.
            raise SagaNotFound(f"no saga {saga_id!r}")
        return first

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

    writes: bool
    """Whether the store may write (a read-only store on a standby may not)."""

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

    def due_streams(self, prefix: str, now: datetime, limit: int, *,
                    since: datetime | None = None) -> list[DueStream]:
        """The streams of ``prefix`` due by ``now`` (after ``since``), the longest due first."""
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
    """What every :class:`~events.saga_log.port.SagaLog` shares: sagas folded from a store's
    ``saga-<id>`` streams and appended with tenant (and actor) metadata. A log says only
    what its unit of work is (:meth:`unit_of_work`, :meth:`_within`)."""

    def __init__(self, store: EventStreams, codec: SagaCodec, snapshots: Snapshots, *,
                 snapshot_every: int = DEFAULT_SNAPSHOT_EVERY) -> None:
        """``snapshot_every``: a load that folded more events than this past its snapshot
        writes a new one (0: snapshots off, every load folds the whole stream). On a store
        that may not write (a read-only store on a standby) loads still start from
        snapshots, and write none."""
        self.streams = store
        self.codec = codec
        self.snapshots = snapshots
        self.snapshot_every = snapshot_every

    def load(
        self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
    ) -> LoadedSaga:
        """Fold a saga's stream (up to ``at`` if given; from its snapshot, if one checks
        out, when not); SagaNotFound if absent or not visible."""
        if at is not None or not self.snapshot_every:
            return self.load_history(saga_id, tenant=tenant, at=at)
        stream_id = saga_stream(saga_id)
        read = self.snapshots.read_from_snapshots([stream_id], SNAPSHOT_SCHEMA)[stream_id]
        return self._fold_read(saga_id, read, tenant)

    def load_history(
        self, saga_id: str, *, tenant: str | None = None, at: Position | None = None
    ) -> SagaHistory:
        """Fold every event of a saga's stream (up to ``at``), keeping them: for what needs
        the whole history; SagaNotFound if absent or not visible."""
        records = at_or_before(self.streams.read_stream(saga_stream(saga_id)), at)
        return self.codec.fold(saga_id, records, tenant=tenant)

    def load_many(self, saga_ids: Sequence[str]) -> dict[str, LoadedSaga | SagaError]:
        """Fold several sagas read in one query: each id to its saga, or to the error that
        loading it alone would raise (SagaNotFound, CorruptSagaStream, ...)."""
        streams = {saga_stream(saga_id): saga_id for saga_id in saga_ids}
        if not self.snapshot_every:
            return self.codec.fold_each(streams, self.streams.read_streams(list(streams)))
        reads = self.snapshots.read_from_snapshots(list(streams), SNAPSHOT_SCHEMA)
        loaded: dict[str, LoadedSaga | SagaError] = {}
        for stream_id, saga_id in streams.items():
            try:
                loaded[saga_id] = self._fold_read(saga_id, reads[stream_id], None)
            except SagaError as exc:
                loaded[saga_id] = exc
        return loaded

    def fold_records(
        self, saga_id: str, records: Sequence[RecordedEvent], *, tenant: str | None = None
    ) -> SagaHistory:
        """Fold already-read records of one whole saga stream."""
        return self.codec.fold(saga_id, records, tenant=tenant)

    def drop_snapshots(self) -> int:
        """Forget every snapshot (loads fold whole streams until new ones are written);
        return how many there were."""
        return self.snapshots.drop_snapshots()

    def _fold_read(self, saga_id: str, read: SnapshotRead, tenant: str | None) -> LoadedSaga:
        """Fold a snapshot read (the whole stream when its snapshot does not check out),
        then keep a snapshot if this fold went far past the last one."""
        loaded = self.codec.fold_from_snapshot(saga_id, read, tenant=tenant)
        if loaded is not None:
            folded, head = len(read.after_snapshot()), read.records[-1]
        else:
            whole = read.records if read.snapshot is None else self.streams.read_stream(
                saga_stream(saga_id))
            loaded, folded = self.codec.fold(saga_id, whole, tenant=tenant), len(whole)
            head = whole[-1]  # fold raised SagaNotFound for none
        if self.streams.writes and folded > self.snapshot_every:
            self._keep_snapshot(loaded, head)
        return loaded

    def _keep_snapshot(self, loaded: LoadedSaga, head: RecordedEvent) -> None:
        """Write a snapshot of ``loaded`` at its version. Written by the load that folded
        the events, not at the next append: the load has the state in hand, the append
        path (and its signature) stays as it is, and a saga never loaded again never needs
        one. A failed write costs only speed: logged, never the load's error."""
        snapshot = self.codec.snapshot_of(loaded, head)
        if snapshot is None:
            return
        try:
            self.snapshots.save_snapshot(snapshot, SNAPSHOT_SCHEMA)
        except (SagaError, TypeError, ValueError) as exc:
            log.warning("no snapshot of saga %s at %d: %s", loaded.saga_id, loaded.version, exc)

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

    def due(self, now: datetime, limit: int, *, since: datetime | None = None) -> list[DueSaga]:
        """The sagas due by ``now`` (and, with ``since``, after it: what came due since a
        pass at ``since``), the longest due first (at most ``limit``)."""
        found = self.streams.due_streams(STREAM_PREFIX, now, limit, since=since)
        return [DueSaga(s.stream_id[len(STREAM_PREFIX):], s.version, s.due_at) for s in found]

    def defer(self, items: Sequence[DueSaga]) -> int:
        """Set each saga's due time while it is still at the item's version (one write)."""
        return self.streams.defer_due(
            [DueStream(saga_stream(i.saga_id), i.version, i.due_at) for i in items])

    @abstractmethod
    def _within(self, unit: Unit) -> Appender:
        """This log's own unit of work behind ``unit`` (InvalidArgument for another's)."""
