"""The in-memory :class:`~events.saga_log.port.SagaLog` (``sagafleet.testing``'s), held to the
PostgreSQL log's contract by ``tests/contract``. Thread-safe (one lock each). Build the
in-memory ports together::

    definitions = MemoryDefinitions()
    log = MemorySagaLog(definitions, clock=clock)
    secrets = MemorySecrets()
    with log.unit_of_work() as unit:
        secrets.keep(saga_id, values, unit)
        log.append(saga_id, tenant, [started], NO_STREAM, unit=unit)
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, NamedTuple

from events.definition_store.port import Definitions
from events.errors import InvalidArgument
from events.eventstore.memory import MemoryEventStore, MemoryUnit
from events.eventstore.model import KEEP_DUE, AppendResult, Clock, DueTime, ExpectedVersion, utc_now
from events.eventstore.rules import checked_stream_list
from events.saga_log.port import Unit, unit_of
from events.saga_log.snapshots import SnapshotRead, StoredSnapshot, text_hash
from events.saga_log.streams import SagaCodec, SagaStreams, saga_registry
from saga_core.engine.events import SagaEvent
from saga_core.engine.state_codec import DEFAULT_SNAPSHOT_EVERY


class MemorySagaLog(SagaStreams):
    """Sagas folded from a :class:`MemoryEventStore` (one of its own unless given)."""

    def __init__(
        self,
        definitions: Definitions,
        *,
        clock: Clock = utc_now,
        store: MemoryEventStore | None = None,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    ) -> None:
        """``snapshot_every``: see :class:`~events.saga_log.streams.SagaStreams`."""
        self.store = store if store is not None else MemoryEventStore(
            registry=saga_registry(), clock=clock
        )
        self.definitions = definitions
        self.registry = self.store.registry or saga_registry()
        self._appended = threading.Condition()
        self._appends = 0  # counts this log's appends and units: what a watcher waits on
        super().__init__(self.store, SagaCodec(self.registry, definitions),
                         MemorySnapshots(self.store), snapshot_every=snapshot_every)

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
        """Append as every log does, then wake this log's watchers (a unit wakes them as it
        ends, when its appends are applied)."""
        result = super().append(saga_id, tenant, events, expected_version, actor=actor,
                                unit=unit, trace_id=trace_id, due_at=due_at)
        if unit is None:
            self._wake()
        return result

    @contextmanager
    def unit_of_work(self) -> Iterator[MemoryUnit]:
        """A unit of work: applied on a clean exit, nothing at all on an exception."""
        try:
            with self.store.transaction() as unit:
                yield unit
        finally:
            self._wake()  # a spurious wake-up (nothing applied) only means "look again"

    def watch(self) -> AbstractContextManager[_MemoryChanges]:
        """Wake-ups on this log's own appends (not on another log sharing its store)."""
        return nullcontext(_MemoryChanges(self, self._appends))

    def _wake(self) -> None:
        with self._appended:
            self._appends += 1
            self._appended.notify_all()

    def _within(self, unit: Unit) -> MemoryUnit:
        mine = unit_of(MemoryUnit, unit)
        if mine.store is not self.store:
            raise InvalidArgument("this unit of work belongs to another in-memory log")
        return mine


class _Kept(NamedTuple):
    """One stream's snapshot as the in-memory store keeps it: its state as JSON text only
    (each reader decodes its own copy), sealed with that text's hash when written."""

    schema: str
    snapshot: StoredSnapshot  # its state left out: ``text`` holds it
    text: str
    sealed: str


class MemorySnapshots:
    """The in-memory :class:`~events.saga_log.snapshots.Snapshots`: one per stream, kept as JSON
    text (as PostgreSQL keeps it: a reader decodes a copy, never a live state), sealed with
    that text's hash as PostgreSQL seals its jsonb text."""

    def __init__(self, store: MemoryEventStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._kept: dict[str, _Kept] = {}

    def read_from_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, SnapshotRead]:
        """Each stream id to its snapshot of ``schema`` and the events a fold from it needs
        (as PostgreSQL reads them: the first, then those from the snapshot's version on)."""
        checked_stream_list(stream_ids)
        return {stream_id: self._read(stream_id, schema) for stream_id in dict.fromkeys(stream_ids)}

    def _read(self, stream_id: str, schema: str) -> SnapshotRead:
        with self._lock:
            kept = self._kept.get(stream_id)
        if kept is None or kept.schema != schema:
            return SnapshotRead(None, self.store.read_stream(stream_id))
        first = self.store.read_stream(stream_id, to_version=1)
        if not first:
            return SnapshotRead(None, [])
        snapshot = self._fresh(kept)
        after = self.store.read_stream(stream_id, after_version=max(snapshot.version, 2) - 1)
        return SnapshotRead(snapshot, [*first, *after])

    @staticmethod
    def _fresh(kept: _Kept) -> StoredSnapshot:
        """A kept snapshot with its own copy of the state, decoded from the text kept, and
        whether that text still matches its seal."""
        return dataclasses.replace(kept.snapshot, state=json.loads(kept.text),
                                   state_intact=text_hash(kept.text) == kept.sealed)

    def read_snapshots(
        self, stream_ids: Sequence[str], schema: str
    ) -> dict[str, StoredSnapshot]:
        """The snapshot of ``schema`` of each stream that has one, as kept."""
        checked_stream_list(stream_ids)
        with self._lock:
            found = {s: self._kept.get(s) for s in stream_ids}
        return {s: self._fresh(kept) for s, kept in found.items()
                if kept is not None and kept.schema == schema}

    def save_snapshot(self, snapshot: StoredSnapshot, schema: str) -> None:
        """Keep ``snapshot`` unless the stream has a newer one of the same ``schema``
        (within the stream: one beyond its head goes)."""
        text = json.dumps(snapshot.state)
        head = self.store.stream_version(snapshot.stream_id)
        with self._lock:
            kept = self._kept.get(snapshot.stream_id)
            if (kept is None or kept.schema != schema
                    or not snapshot.version < kept.snapshot.version <= head):
                self._kept[snapshot.stream_id] = _Kept(
                    schema, dataclasses.replace(snapshot, state=None), text, text_hash(text))

    def drop_snapshots(self) -> int:
        """Forget every snapshot; return how many there were."""
        with self._lock:
            dropped = len(self._kept)
            self._kept.clear()
        return dropped


class _MemoryChanges:
    """A watcher of one :class:`MemorySagaLog`: woken by appends after the last it saw."""

    def __init__(self, log: MemorySagaLog, seen: int) -> None:
        self._log = log
        self._seen = seen

    def wait(self, timeout: float) -> bool:
        """Block until the log appended since the last wake-up or ``timeout`` seconds pass."""
        with self._log._appended:
            woken = self._log._appended.wait_for(lambda: self._log._appends != self._seen,
                                                 timeout)
            self._seen = self._log._appends
        return woken


if TYPE_CHECKING:  # mypy checks that the class keeps its port's signatures
    from events.saga_log.port import SagaLog

    def _conforms(log: MemorySagaLog) -> SagaLog:
        return log
