"""Verification: every read-model row equals a fresh fold of the log; every chain is intact;
every snapshot is the fold it claims to be; the log still holds what its checkpoints
anchored (events.integrity.anchor_audit). The integrity part is :mod:`projections.integrity`, which
``audit`` runs on its saga too.

A row reflects its saga up to the ``stream_version`` it records, so each saga is folded
afresh up to that version and compared column by column; a projector that is merely
behind the head is reported as lagging, not as a difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from events import Position, RecordedEvent
from events.integrity.anchor_audit import AnchorReport
from events.saga_log.snapshots import PostgresSnapshots, StoredSnapshot
from events.saga_log.streams import CorruptSagaStream, saga_id_of
from projections.context import ProjectionContext
from projections.integrity import (
    IntegrityChecks,
    StreamIntegrity,
    check_anchors,
    check_stream,
    saga_codec,
)
from projections.record import replay
from projections.rows import SagaRows, rows_of
from projections.store import StoredRows, read_rows
from projections.tables import active_version, subscription_name
from saga_core.engine.events import SagaEvent
from saga_core.engine.state_codec import SCHEMA as SNAPSHOT_SCHEMA
from saga_core.errors import SagaError

SNAPSHOTS_PER_READ = 500
"""How many streams' snapshots verify reads in one query."""


@dataclass(frozen=True)
class Difference:
    """One way the read model and the log disagree, for one saga."""

    saga_id: str
    table: str
    key: str
    problem: str
    column: str | None = None
    expected: Any = None
    actual: Any = None


@dataclass(frozen=True)
class VerifyReport:
    """What verify checked and every difference it found."""

    projection: str
    version: int
    streams_checked: int
    sagas_checked: int
    broken_chains: int
    lagging: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    anchors: AnchorReport | None = None
    snapshots_checked: int = 0

    @property
    def tampered(self) -> bool:
        """The log no longer holds what its checkpoints anchored (or they were tampered with)."""
        return self.anchors is not None and not self.anchors.ok

    @property
    def ok(self) -> bool:
        """No difference, no broken chain, no anchor finding."""
        return not self.differences and not self.tampered


def _compare_row(
    saga_id: str, table: str, key: str, expected: object, actual: object
) -> list[Difference]:
    if expected is None or actual is None:
        if expected is actual:
            return []
        problem = "missing from the read model" if actual is None else "not in the log"
        return [Difference(saga_id, table, key, problem)]
    return [
        Difference(
            saga_id,
            table,
            key,
            "differs",
            f.name,
            getattr(expected, f.name),
            getattr(actual, f.name),
        )
        for f in fields(expected)  # type: ignore[arg-type]
        if getattr(expected, f.name) != getattr(actual, f.name)
    ]


def compare_rows(saga_id: str, expected: SagaRows | None, stored: StoredRows) -> list[Difference]:
    """Every difference between the rows a fold gives and the rows stored for one saga."""
    found = _compare_row(
        saga_id, "saga_summary", saga_id, expected.summary if expected else None, stored.summary
    )
    want_steps = {(s.step_id, s.kind): s for s in expected.steps} if expected else {}
    have_steps = {(s.step_id, s.kind): s for s in stored.steps}
    for key in sorted(want_steps.keys() | have_steps.keys()):
        found += _compare_row(
            saga_id, "step_runs", "/".join(key), want_steps.get(key), have_steps.get(key)
        )
    want_queue = {(q.entry, q.step_id, q.kind): q for q in expected.queue} if expected else {}
    have_queue = {(q.entry, q.step_id, q.kind): q for q in stored.queue}
    for entry in sorted(want_queue.keys() | have_queue.keys()):
        found += _compare_row(
            saga_id,
            "operator_queue",
            "/".join(entry),
            want_queue.get(entry),
            have_queue.get(entry),
        )
    return found


def _expected_rows(
    ctx: ProjectionContext, records: list[RecordedEvent], upto: int
) -> SagaRows | None:
    assert ctx.store.registry is not None
    pairs: list[tuple[SagaEvent, int]] = []
    for recorded in records[:upto]:
        event = ctx.store.registry.decode(recorded)
        if not isinstance(event, SagaEvent):
            raise CorruptSagaStream(
                f"{recorded.stream_id}@{recorded.stream_version}: not a saga event"
            )
        pairs.append((event, recorded.stream_version))
    if not pairs:
        return None
    first = pairs[0][0]
    definition = ctx.definitions.by_hash(getattr(first, "definition_hash", ""))
    record = replay(definition, pairs)
    return rows_of(record) if record is not None else None


def verify(
    ctx: ProjectionContext,
    name: str = "sagas",
    *,
    checks: IntegrityChecks | None = None,
) -> VerifyReport:
    """Fold every saga afresh, compare with the active read model, check every chain and
    every snapshot, and check the log against its checkpoints as ``checks`` say (the key,
    a checkpoint kept by hand, the high-water mark, the age of unanchored events)."""
    anchors = check_anchors(ctx, checks or IntegrityChecks())
    codec = saga_codec(ctx)
    with ctx.connection() as conn:
        version = active_version(conn, name)
        streams = sorted(r[0] for r in conn.execute("SELECT stream_id FROM eventstore.streams"))
        stored = read_rows(conn, version)
    snapshots = _snapshots(ctx, [s for s in streams if saga_id_of(s) is not None])
    checkpoint = _checkpoint(ctx, name, version)
    differences: list[Difference] = []
    lagging: list[str] = []
    broken = 0
    sagas = 0
    for stream_id in streams:
        records = ctx.store.read_stream(stream_id)
        integrity = check_stream(ctx, stream_id, records, snapshots.get(stream_id), codec)
        saga_id = saga_id_of(stream_id)
        if integrity.chain_break is not None:
            broken += 1
        differences += _integrity_differences(saga_id or stream_id, integrity)
        if saga_id is None:
            continue
        sagas += 1
        rows = stored.pop(saga_id, StoredRows(None, (), ()))
        upto = rows.summary.stream_version if rows.summary else len(records)
        if rows.summary is None and (checkpoint is None or records[0].position > checkpoint):
            lagging.append(saga_id)  # not reached by the projector yet
            continue
        if upto > len(records):
            differences.append(
                Difference(
                    saga_id,
                    "saga_summary",
                    saga_id,
                    "ahead of the log",
                    "stream_version",
                    len(records),
                    upto,
                )
            )
            continue
        if upto < len(records):
            lagging.append(saga_id)
        try:
            expected = _expected_rows(ctx, records, upto)
        except SagaError as exc:
            differences.append(
                Difference(saga_id, "eventstore.events", stream_id, f"the log does not fold: {exc}")
            )
            continue
        differences += compare_rows(saga_id, expected, rows)
    for saga_id, rows in sorted(stored.items()):
        differences += compare_rows(saga_id, None, rows)
    return VerifyReport(
        name, version, len(streams), sagas, broken, lagging, differences, anchors,
        snapshots_checked=len(snapshots),
    )


def _integrity_differences(who: str, integrity: StreamIntegrity) -> list[Difference]:
    """A stream's broken chain (or head) and its snapshot's problem, as differences."""
    found: list[Difference] = []
    stream_id = integrity.stream_id
    if integrity.chain_break is not None:
        found.append(Difference(who, "eventstore.events",
                                f"{stream_id}@{integrity.chain_break.stream_version}",
                                f"hash chain broken: {integrity.chain_break.reason}"))
    if integrity.snapshot_problem is not None:
        found.append(Difference(who, "eventstore.snapshots",
                                f"{stream_id}@{integrity.snapshot_version}",
                                f"snapshot refused: {integrity.snapshot_problem}"))
    return found


def _snapshots(ctx: ProjectionContext, stream_ids: list[str]) -> dict[str, StoredSnapshot]:
    """The snapshot (of this code's schema: the only ones a load reads) of each stream."""
    reader = PostgresSnapshots(ctx.store)
    found: dict[str, StoredSnapshot] = {}
    for start in range(0, len(stream_ids), SNAPSHOTS_PER_READ):
        found |= reader.read_snapshots(stream_ids[start:start + SNAPSHOTS_PER_READ],
                                       SNAPSHOT_SCHEMA)
    return found


def _checkpoint(ctx: ProjectionContext, name: str, version: int) -> Position | None:
    return ctx.store.checkpoint(subscription_name(name, version))
