"""The snapshot policy of a saga log: written past N folded events, never with N = 0."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events.definition_store.memory import MemoryDefinitions
from events.eventstore.model import NO_STREAM
from events.saga_log.memory import MemorySagaLog
from events.saga_log.streams import saga_stream
from saga_core import CancelRequested, SagaStarted
from saga_core.engine.state_codec import SCHEMA
from sagafleet.example_sagas import trip_definition

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def saga_of(log: MemorySagaLog, definitions: MemoryDefinitions, notes: int) -> None:
    """A started trip saga "s" with ``notes`` more events."""
    definition = trip_definition()
    definitions.register_shared(definition)
    log.append("s", "t", [SagaStarted(
        at=T0, saga_id="s", tenant="t", definition_name=definition.name,
        definition_version=definition.version, definition_hash=definition.content_hash(),
        input={}, input_hash="h" * 64, retry_budget=definition.retry_budget)], NO_STREAM)
    log.append("s", "t", [CancelRequested(at=T0 + timedelta(minutes=n), actor="op", reason="")
                          for n in range(notes)], 1)


def kept_version(log: MemorySagaLog) -> int | None:
    """The version of the snapshot the log keeps of "s" (None: none)."""
    read = log.snapshots.read_from_snapshots([saga_stream("s")], SCHEMA)[saga_stream("s")]
    return None if read.snapshot is None else read.snapshot.version


def test_a_load_past_n_events_keeps_a_snapshot_at_its_version_and_one_within_n_does_not() -> None:
    definitions = MemoryDefinitions()
    log = MemorySagaLog(definitions, snapshot_every=4)
    saga_of(log, definitions, notes=4)  # 5 events: more than 4
    assert log.load("s").version == 5 and kept_version(log) == 5
    log.append("s", "t", [CancelRequested(at=T0, actor="op", reason="")] * 4, 5)
    assert log.load("s").version == 9 and kept_version(log) == 5  # folded 4: not more than 4
    log.append("s", "t", [CancelRequested(at=T0, actor="op", reason="")], 9)
    assert log.load("s").version == 10 and kept_version(log) == 10


def test_with_n_zero_no_load_keeps_a_snapshot() -> None:
    definitions = MemoryDefinitions()
    log = MemorySagaLog(definitions, snapshot_every=0)
    saga_of(log, definitions, notes=50)
    assert log.load("s").state == log.load_history("s").state
    assert kept_version(log) is None
