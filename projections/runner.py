"""The checkpointed runner: follows the log gap-safely and keeps one table set up to date.

Each batch comes from an ``events`` subscription inside an open transaction: the rows the
batch changes and the checkpoint commit together, so a crash mid-batch leaves neither.
Per saga stream the runner checks ``stream_version == last + 1`` against the version its
summary row reflects: a lower version is a duplicate (skipped), a higher one a gap. A gap
is filled from the stream in the same transaction (the missing events are committed, the
head lock ordered them, but a writer with an older xid can sort them later in the log);
if the stream cannot supply them the batch stops before the event and is retried.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from events import (
    Batch,
    GateVerdict,
    Position,
    RecordedEvent,
    Subscription,
    SubscriptionBusy,
    stream_version_gate,
)
from events.saga_log.streams import CorruptSagaStream, saga_id_of, saga_stream
from projections.context import ProjectionContext
from projections.record import SagaRecord, fold_event
from projections.rows import SagaRows, rows_of
from projections.store import TableSetWriter, stream_versions
from projections.tables import active_version, check_projection, subscription_name
from saga_core.errors import SagaError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchReport:
    """What one batch did: events read, applied, skipped, filled, rows written, checkpoint."""

    version: int
    events: int = 0
    applied: int = 0
    duplicates: int = 0
    filled: int = 0
    stopped_at_gap: bool = False
    rows_written: int = 0
    checkpoint: Position | None = None
    switched: bool = False


@dataclass(frozen=True)
class CachedSaga:
    """A saga's record and the rows last committed for it."""

    record: SagaRecord
    rows: SagaRows


@dataclass
class _Working:
    record: SagaRecord | None
    previous: SagaRows | None
    applied: int = 0


@dataclass
class _Tally:
    applied: int = 0
    duplicates: int = 0
    filled: int = 0
    stopped: bool = False
    touched: dict[str, _Working] = field(default_factory=dict)


class ProjectionRunner:
    """Keeps one projection's table set current from its checkpoint, one batch at a time."""

    def __init__(
        self,
        ctx: ProjectionContext,
        name: str = "sagas",
        *,
        version: int | None = None,
        batch_size: int = 500,
        cache_size: int = 5000,
        on_batch: Callable[[Batch], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.name = check_projection(name)
        self.follow_active = version is None
        self.batch_size = batch_size
        self._cache_size = cache_size
        self._cache: OrderedDict[str, CachedSaga] = OrderedDict()
        # A seam for tests (and metrics): runs inside the batch's transaction, after the
        # rows are written; raising rolls the rows and the checkpoint back together.
        self._on_batch = on_batch
        self._version = version
        self._sub: Subscription | None = None
        self._writer: TableSetWriter | None = None
        # The subscription's session the cache was filled on: a new one (a reconnection,
        # maybe to a promoted standby that lacks the old primary's last commits) empties it.
        self._cache_session = 0
        if ctx.store.registry is None:
            raise CorruptSagaStream("a projection runner needs a store with saga_registry()")
        self._registry = ctx.store.registry

    # -- binding -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The table-set version this runner writes (the active one when following)."""
        if self._version is None:
            with self.ctx.connection() as conn:
                self._version = active_version(conn, self.name)
        return self._version

    def _subscription(self) -> Subscription:
        if self._sub is None:
            self._sub = self.ctx.store.subscription(
                subscription_name(self.name, self.version), log_from=self.ctx.log_reads)
            self._writer = TableSetWriter(self.version)
        return self._sub

    def _rebind(self, version: int) -> None:
        self.close()
        self._version = version

    def close(self) -> None:
        """Release the subscription (its lock and connection) and forget the cache."""
        if self._sub is not None:
            self._sub.close()
        self._sub = None
        self._writer = None
        self._cache.clear()

    # -- one batch ------------------------------------------------------------------------

    def run_once(self, *, switch_when_caught_up: bool = False) -> BatchReport:
        """Apply the next batch; with ``switch_when_caught_up`` make this set the active one
        in the same transaction if the batch reached the horizon. SubscriptionBusy if held."""
        sub = self._subscription()
        tally = _Tally()
        switched_to: int | None = None
        with sub.next_batch(self.batch_size) as batch:
            if sub.session != self._cache_session:
                self._cache.clear()
                self._cache_session = sub.session
            conn = batch.connection
            if self.follow_active:
                current = active_version(conn, self.name, lock=True)
                if current != self.version:
                    switched_to = current
                    if batch.events:
                        batch.stop_before(batch.events[0])
            if switched_to is None:
                self._apply(batch, tally)
                assert self._writer is not None
                changes = [
                    (rows_of(w.record), w.previous)
                    for w in tally.touched.values()
                    if w.record is not None
                ]
                written = self._writer.write(conn, changes)
                if self._on_batch is not None:
                    self._on_batch(batch)
                caught_up = len(batch.events) < self.batch_size and not tally.stopped
                if switch_when_caught_up and caught_up:
                    self._switch(batch)
                    switched_to = self.version
            checkpoint = batch.advance_to or batch.checkpoint
            events = len(batch.events)
        if switched_to is not None and self.follow_active:
            version = self.version
            self._rebind(switched_to)
            return BatchReport(version, events=events, checkpoint=checkpoint, switched=True)
        self._remember(tally)
        return BatchReport(
            self.version,
            events=events,
            applied=tally.applied,
            duplicates=tally.duplicates,
            filled=tally.filled,
            stopped_at_gap=tally.stopped,
            rows_written=written,
            checkpoint=checkpoint,
            switched=switched_to is not None,
        )

    def _apply(self, batch: Batch, tally: _Tally) -> None:
        saga_events = [(sid, e) for e in batch.events if (sid := saga_id_of(e.stream_id))]
        versions = stream_versions(batch.connection, self.version, {s for s, _ in saga_events})
        for saga_id, event in saga_events:
            last = versions.get(saga_id, 0)
            verdict = stream_version_gate(last, event)
            if verdict is GateVerdict.DUPLICATE:
                tally.duplicates += 1
                continue
            todo = [event]
            if verdict is GateVerdict.GAP:
                missing = batch.read_stream(event.stream_id, last, event.stream_version - 1)
                if [m.stream_version for m in missing] != list(
                    range(last + 1, event.stream_version)
                ):
                    batch.stop_before(event)
                    tally.stopped = True
                    return
                todo = [*missing, event]
                tally.filled += len(missing)
            working = tally.touched.get(saga_id) or self._start_working(batch, saga_id, last)
            for recorded in todo:
                working.record = self._fold(working.record, recorded)
            tally.touched[saga_id] = working
            tally.applied += len(todo)
            versions[saga_id] = event.stream_version

    def _start_working(self, batch: Batch, saga_id: str, last: int) -> _Working:
        if last == 0:
            return _Working(None, None)
        cached = self._cache.get(saga_id)
        if cached is not None and cached.record.stream_version == last:
            return _Working(cached.record, cached.rows)
        # Not cached (restart, eviction, another copy ran meanwhile): fold what was applied.
        record: SagaRecord | None = None
        for recorded in batch.read_stream(saga_stream(saga_id), 0, last):
            record = self._fold(record, recorded)
        return _Working(record, None)

    def _fold(self, record: SagaRecord | None, recorded: RecordedEvent) -> SagaRecord:
        return fold_event(self.ctx.definitions, self._registry, record, recorded)

    def _switch(self, batch: Batch) -> None:
        conn = batch.connection
        conn.execute(
            "UPDATE projections.table_sets SET status = 'retired'"
            " WHERE name = %s AND status = 'active'",
            (self.name,),
        )
        conn.execute(
            "UPDATE projections.table_sets SET status = 'active', switched_at = now()"
            " WHERE name = %s AND version = %s",
            (self.name, self.version),
        )
        conn.execute(
            "INSERT INTO projections.active_versions (name, version) VALUES (%s, %s)"
            " ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, switched_at = now()",
            (self.name, self.version),
        )

    def _remember(self, tally: _Tally) -> None:
        # Only after the commit: a rolled-back batch must leave the cache as it was.
        for saga_id, working in tally.touched.items():
            if working.record is None:
                continue
            if working.record.state.finished is not None:
                # Nothing can follow SagaFinished; keep memory flat over millions of sagas.
                self._cache.pop(saga_id, None)
                continue
            self._cache[saga_id] = CachedSaga(working.record, rows_of(working.record))
            self._cache.move_to_end(saga_id)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    # -- continuously ---------------------------------------------------------------------

    def catch_up(self, *, max_batches: int | None = None) -> int:
        """Apply batches until the horizon is reached; return the events applied."""
        applied = 0
        batches = 0
        while max_batches is None or batches < max_batches:
            report = self.run_once()
            applied += report.applied
            batches += 1
            if not report.switched and (report.events < self.batch_size or report.stopped_at_gap):
                break
        return applied

    def run_forever(self, stop: threading.Event, *, poll_s: float = 1.0) -> None:
        """Run until ``stop`` is set: woken by NOTIFY, polling every ``poll_s`` as the truth."""
        backoff = poll_s
        while not stop.is_set():
            try:
                report = self.run_once()
                backoff = poll_s
            except SubscriptionBusy:
                # Another copy runs this projection; stand by and take over if it stops.
                stop.wait(poll_s)
                continue
            except SagaError as exc:
                log.warning("projection %s: %s; retrying in %.1fs", self.name, exc, backoff)
                self.close()
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            if report.events < self.batch_size and not report.switched:
                try:
                    self._subscription().wait(poll_s)
                except SagaError:
                    self.close()
