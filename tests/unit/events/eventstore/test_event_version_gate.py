"""The per-stream version gate consumers use (no database)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from events import GateVerdict, Position, RecordedEvent, stream_version_gate


def at_version(version: int) -> RecordedEvent:
    return RecordedEvent(
        stream_id="s",
        stream_version=version,
        event_id=uuid4(),
        type="T",
        schema_version=1,
        data={},
        metadata={},
        recorded_at=datetime.now(UTC),
        position=Position(1, version),
        event_hash="h",
        prev_hash="p",
    )


@pytest.mark.parametrize(
    ("last", "version", "verdict"),
    [
        (0, 1, GateVerdict.APPLY),
        (4, 5, GateVerdict.APPLY),
        (5, 5, GateVerdict.DUPLICATE),
        (5, 2, GateVerdict.DUPLICATE),
        (0, 2, GateVerdict.GAP),
        (3, 9, GateVerdict.GAP),
    ],
)
def test_gate(last: int, version: int, verdict: GateVerdict) -> None:
    assert stream_version_gate(last, at_version(version)) is verdict


def test_positions_order_by_transaction_then_position() -> None:
    assert Position(1, 9) < Position(2, 1) < Position(2, 2)
    assert Position.parse(str(Position(7, 3))) == Position(7, 3)


def test_generated_event_ids_are_version_7_and_time_ordered() -> None:
    import time

    from events import new_event_id

    first = new_event_id()
    time.sleep(0.002)
    second = new_event_id()
    assert first.version == 7 and first.variant == "specified in RFC 4122"
    assert first < second  # a later millisecond sorts later (index right edge)


def test_ids_drawn_in_a_batch_are_distinct_version_7_uuids_like_any_other() -> None:
    import uuid

    from events.eventstore.model import new_event_ids

    batch = new_event_ids(500)
    assert len(set(batch)) == 500
    for made in batch:
        # Built without UUID.__init__, they must still behave as ordinary UUIDs.
        assert made.version == 7 and made.variant == uuid.RFC_4122
        assert made == uuid.UUID(str(made)) and hash(made) == hash(uuid.UUID(int=made.int))
    assert new_event_ids(0) == []
