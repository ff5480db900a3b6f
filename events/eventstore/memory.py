"""An in-memory event store that keeps :class:`events.eventstore.postgres.EventStore`'s promises.

The same preparation (``events.eventstore.prepare``: validation, size limits, normalised JSON), the
same hash chain (``events.eventstore.hashing``), the same errors and the same rules as the module
docstring of ``events.eventstore.postgres`` states:

* Idempotency wins over the version check: re-appending events whose ids are stored
  returns the first attempt's result (``duplicate=True``) even when the expected version is
  stale by now. Same id with other content, or a batch mixing stored and new ids, is
  :class:`EventIdConflict`.
* ``NO_STREAM`` means "version 0": there is no stream deletion, so no empty stream exists.
* A unit of work (:meth:`MemoryEventStore.transaction`) sees its own appends; others see
  them only once it commits. Where PostgreSQL would make a second writer wait for the
  unit's stream lock and then fail, here the second writer wins and the unit fails at its
  commit with :class:`ConcurrencyError` (raised as the ``with`` block ends), nothing
  applied: the same outcome under the other order of commits.

Positions are ``(transaction id, insert order)`` like PostgreSQL's, and :meth:`read_all`
is gap-safe the same way: it stops before the oldest open unit's transaction id.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from pydantic import BaseModel

from events.errors import (
    ConcurrencyError,
    EventIdConflict,
    InvalidArgument,
)
from events.eventstore.hashing import HASH_VERSION, chain_hash
from events.eventstore.model import (
    ANY,
    GENESIS_HASH,
    KEEP_DUE,
    AppendResult,
    Clock,
    DueStream,
    DueTime,
    ExpectedVersion,
    NewEvent,
    Position,
    RecordedEvent,
    utc_now,
)
from events.eventstore.prepare import DEFAULT_MAX_EVENT_BYTES, PreparedEvent, prepare_events
from events.eventstore.reading import (
    MAX_VERSION,
    checked_stream_id,
    checked_version,
    read_all_start,
)
from events.eventstore.registry import EventRegistry
from events.eventstore.rules import checked_stream_list, expected_code, new_events, original_append
from events.eventstore.traces import checked_trace_query, in_trace
from saga_core.limits import TRACE_EVENTS

_loads = json.JSONDecoder().decode


class _Stored(NamedTuple):
    """A recorded event and the JSON texts its data and metadata are read back from, so
    every reader gets its own copy (as every read of PostgreSQL does)."""

    record: RecordedEvent
    data_json: str
    metadata_json: str

    def fresh(self) -> RecordedEvent:
        record = self.record
        copy = object.__new__(RecordedEvent)
        copy.__dict__.update(
            record.__dict__, data=_loads(self.data_json), metadata=_loads(self.metadata_json)
        )
        return copy


class MemoryUnit:
    """One open unit of work of a :class:`MemoryEventStore`: appends and side writes that
    apply together when it commits, and not at all when it does not."""

    def __init__(self, store: MemoryEventStore, xid: int) -> None:
        self.store = store
        self.xid = xid
        self.open = True
        self.pending: dict[str, list[_Stored]] = {}
        self.based_on: dict[str, int] = {}  # stream -> committed version its appends follow
        self.ids: dict[UUID, _Stored] = {}
        self.due: dict[str, datetime | None] = {}  # stream -> due time its appends set
        self.side_writes: list[Callable[[], None]] = []
        self.end_hooks: list[Callable[[], None]] = []  # run as it ends, committed or not

    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion = ANY,
        *,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append inside this unit; it commits (or not) with everything else."""
        return self.store.append_in(self, stream_id, events, expected_version, due_at=due_at)

    def on_commit(self, write: Callable[[], None]) -> None:
        """Run ``write`` when the unit commits (under the store's lock), never otherwise."""
        self.live()
        self.side_writes.append(write)

    def on_end(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when the unit ends, whether it commits or not (under the store's
        lock: ``hook`` may take no lock that is held while waiting for that one)."""
        self.live()
        self.end_hooks.append(hook)

    def live(self) -> None:
        """InvalidArgument when the unit has ended (its writes would go nowhere)."""
        if not self.open:
            raise InvalidArgument("this unit of work has ended; open a new one")


class MemoryEventStore:
    """Append-only event log in this process, behind one lock; thread-safe."""

    writes: bool = True
    """Always: there is no read-only in-memory store (``EventStore.writes``)."""

    def __init__(
        self,
        *,
        registry: EventRegistry | None = None,
        clock: Clock = utc_now,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self.registry = registry
        self._clock = clock
        self._max_event_bytes = max_event_bytes
        self._lock = threading.Lock()
        self._streams: dict[str, list[_Stored]] = {}
        self._by_id: dict[UUID, _Stored] = {}
        self._log: list[_Stored] = []  # committed, in position order
        self._xids = itertools.count(1)
        self._positions = itertools.count(1)
        self._open: set[int] = set()  # xids of open units (read_all stops before them)
        self._due: dict[str, datetime] = {}  # stream -> its head's due time, when it has one

    # -- writing -------------------------------------------------------------------

    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion = ANY,
        *,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append events to one stream if it is at ``expected_version`` (committed now);
        ``due_at`` as :meth:`EventStore.append` takes it."""
        prepared, expected = self._prepare(stream_id, events, expected_version)
        with self._lock:
            unit = MemoryUnit(self, next(self._xids))
            result = self._append_locked(unit, stream_id, prepared, expected_version, expected,
                                         due_at=due_at)
            if not result.duplicate:
                self._apply(unit)
            return result

    def append_in(
        self,
        unit: MemoryUnit,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion = ANY,
        *,
        due_at: DueTime = KEEP_DUE,
    ) -> AppendResult:
        """Append inside ``unit`` (see :meth:`MemoryUnit.append`)."""
        prepared, expected = self._prepare(stream_id, events, expected_version)
        unit.live()
        with self._lock:
            return self._append_locked(unit, stream_id, prepared, expected_version, expected,
                                       due_at=due_at)

    @contextmanager
    def transaction(self) -> Iterator[MemoryUnit]:
        """A unit of work: everything written with it applies on a clean exit (or raises
        ConcurrencyError/EventIdConflict, applying nothing), nothing on an exception."""
        with self._lock:
            unit = MemoryUnit(self, next(self._xids))
            self._open.add(unit.xid)
        try:
            yield unit
        except BaseException:
            with self._lock:
                self._end(unit)
            raise
        with self._lock:
            try:
                self._check_still_based(unit)
                self._apply(unit)
            finally:
                self._end(unit)

    def _prepare(
        self,
        stream_id: str,
        events: Sequence[NewEvent | BaseModel],
        expected_version: ExpectedVersion,
    ) -> tuple[list[PreparedEvent], int]:
        # Validated as EventStore.append validates, in the same order: the same errors.
        converted = new_events(self.registry, events)
        prepared = prepare_events(stream_id, converted, self._max_event_bytes, self._clock())
        return prepared, expected_code(expected_version)

    def _append_locked(
        self,
        unit: MemoryUnit,
        stream_id: str,
        prepared: list[PreparedEvent],
        expected_version: ExpectedVersion,
        expected: int,
        *,
        due_at: DueTime,
    ) -> AppendResult:
        committed = self._streams.get(stream_id, [])
        pending = unit.pending.get(stream_id, [])
        actual = len(committed) + len(pending)
        clash = any(e.event_id in self._by_id or e.event_id in unit.ids for e in prepared)
        if clash or (expected >= 0 and expected != actual):
            original = self._original_append(unit, stream_id, prepared)
            if original is not None:
                return original
            raise ConcurrencyError(stream_id, expected_version, actual)
        tip = (pending or committed)[-1].record.event_hash if actual else GENESIS_HASH
        stored: list[_Stored] = []
        for version, event in enumerate(prepared, actual + 1):
            digest = chain_hash(tip, event.body.at(version))  # the body PostgreSQL hashes
            record = RecordedEvent(
                stream_id=stream_id,
                stream_version=version,
                event_id=event.event_id,
                type=event.type,
                schema_version=event.schema_version,
                data=event.data,
                metadata=event.metadata,
                recorded_at=event.recorded_at,
                position=Position(unit.xid, next(self._positions)),
                event_hash=digest,
                prev_hash=tip,
                tenant_id=event.tenant_id,
                hash_version=HASH_VERSION,
            )
            stored.append(_Stored(record, event.data_json, event.metadata_json))
            tip = digest
        unit.based_on.setdefault(stream_id, len(committed))
        unit.pending.setdefault(stream_id, []).extend(stored)
        unit.ids.update((s.record.event_id, s) for s in stored)
        if due_at is not KEEP_DUE:
            unit.due[stream_id] = due_at
        elif not committed and not pending:
            unit.due[stream_id] = None  # a new stream starts with no due time
        return AppendResult(
            stream_id=stream_id,
            version=stored[-1].record.stream_version,
            events=tuple(s.fresh() for s in stored),
        )

    def _original_append(
        self, unit: MemoryUnit, stream_id: str, prepared: list[PreparedEvent]
    ) -> AppendResult | None:
        """The earlier append these events repeat, looked up as the PostgreSQL store looks
        it up: among the committed events and this unit's own."""
        stored: dict[UUID, RecordedEvent] = {}
        for event in prepared:
            found = self._by_id.get(event.event_id) or unit.ids.get(event.event_id)
            if found is not None:
                stored[event.event_id] = found.fresh()
        return original_append(stream_id, prepared, stored)

    def _check_still_based(self, unit: MemoryUnit) -> None:
        for stream_id, version in unit.based_on.items():
            actual = len(self._streams.get(stream_id, ()))
            if actual != version:
                raise ConcurrencyError(stream_id, version, actual)
        for event_id in unit.ids:
            if event_id in self._by_id:
                raise EventIdConflict(event_id, "in another append")

    def _apply(self, unit: MemoryUnit) -> None:
        applied = sorted(
            (s for stored in unit.pending.values() for s in stored),
            key=lambda s: s.record.position,
        )
        for stream_id, stored in unit.pending.items():
            self._streams.setdefault(stream_id, []).extend(stored)
        self._by_id.update(unit.ids)
        for stream_id, due in unit.due.items():
            self._set_due(stream_id, due)
        first = applied[0].record.position if applied else None
        late = first is not None and bool(self._log) and self._log[-1].record.position > first
        self._log.extend(applied)
        if late:  # a unit opened before a later append commits after it: keep position order
            self._log.sort(key=lambda s: s.record.position)
        for write in unit.side_writes:
            write()

    def _set_due(self, stream_id: str, due: datetime | None) -> None:
        if due is None:
            self._due.pop(stream_id, None)
        else:
            self._due[stream_id] = due

    def defer_due(self, items: Sequence[DueStream]) -> int:
        """Set each stream's due time (None clears it) only while its head is still at the
        item's version, as :meth:`EventStore.defer_due` does; how many were set."""
        deferred = 0
        with self._lock:
            for stream_id, version, due in items:
                stored = self._streams.get(stream_id)
                if stored and len(stored) == version:
                    self._set_due(stream_id, due)
                    deferred += 1
        return deferred

    def _end(self, unit: MemoryUnit) -> None:
        unit.open = False
        self._open.discard(unit.xid)
        for hook in unit.end_hooks:
            hook()

    # -- reading -------------------------------------------------------------------

    def read_stream(
        self, stream_id: str, *, after_version: int = 0, to_version: int | None = None
    ) -> list[RecordedEvent]:
        """A stream's events in version order (all of them by default)."""
        checked_stream_id(stream_id)
        after = checked_version("after_version", after_version)
        upper = MAX_VERSION if to_version is None else checked_version("to_version", to_version)
        with self._lock:
            found = self._streams.get(stream_id, [])[after:upper]
        return [s.fresh() for s in found]

    def events_of_trace(
        self, tenant: str, trace_id: str, *, limit: int = TRACE_EVENTS.value
    ) -> list[RecordedEvent]:
        """The tenant's events of a saga lineage trace, oldest first (as
        :meth:`EventStore.events_of_trace`)."""
        tenant, trace_id, limit = checked_trace_query(tenant, trace_id, limit)
        with self._lock:
            found = [s for s in self._log if in_trace(s.record, tenant, trace_id)]
        return [s.fresh() for s in found[:limit]]

    def read_streams(self, stream_ids: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several whole streams: each id to its events in version order, an empty list for
        a stream with none (the same limits as :meth:`EventStore.read_streams`)."""
        wanted = [checked_stream_id(stream_id) for stream_id in checked_stream_list(stream_ids)]
        with self._lock:
            found = {stream_id: list(self._streams.get(stream_id, [])) for stream_id in wanted}
        return {stream_id: [s.fresh() for s in stored] for stream_id, stored in found.items()}

    def read_all(self, after: Position | None = None, limit: int = 1000) -> list[RecordedEvent]:
        """A gap-safe page of the global log after ``after`` (None: from the start)."""
        cursor = read_all_start(after, limit)
        with self._lock:
            horizon = min(self._open, default=None)
            page = []
            for stored in self._log:  # linear: a test's log is small
                position = stored.record.position
                if horizon is not None and position.transaction_id >= horizon:
                    break
                if position > cursor:
                    page.append(stored)
                    if len(page) == limit:
                        break
        return [s.fresh() for s in page]

    def due_streams(self, prefix: str, now: datetime, limit: int, *,
                    since: datetime | None = None) -> list[DueStream]:
        """The streams whose id starts with ``prefix`` due by ``now`` (and, with ``since``,
        after it), the longest due first (at most ``limit``), as
        :meth:`EventStore.due_streams` finds them."""
        with self._lock:
            due = sorted(
                (due_at, stream_id) for stream_id, due_at in self._due.items()
                if due_at <= now and (since is None or due_at > since)
                and stream_id.startswith(prefix)
            )[:limit]
            return [DueStream(stream_id, len(self._streams[stream_id]), due_at)
                    for due_at, stream_id in due]

    def stream_version(self, stream_id: str) -> int:
        """The stream's current version; 0 when it has no events."""
        checked_stream_id(stream_id)
        with self._lock:
            return len(self._streams.get(stream_id, ()))

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        """The stream head's (version, last event hash), None for an unknown stream."""
        checked_stream_id(stream_id)
        with self._lock:
            stored = self._streams.get(stream_id)
            return (len(stored), stored[-1].record.event_hash) if stored else None

