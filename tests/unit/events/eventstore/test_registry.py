"""Event schemas: registration, upcasting chains and typed decode errors (no database)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from pydantic import BaseModel

from events import (
    EventDecodeError,
    EventRegistry,
    Position,
    RecordedEvent,
    RegistryConflict,
    ScannedEvent,
    UnknownEventType,
    UnknownSchemaVersion,
    UnregisteredEventModel,
)


class HotelHeld(BaseModel):
    """Version 3: ``hold_id`` (v1 ``hold``), ``nights`` added in v3."""

    hold_id: str
    nights: int


def recorded(type_name: str, version: int, data: dict[str, Any]) -> RecordedEvent:
    return RecordedEvent(
        stream_id="s",
        stream_version=1,
        event_id=uuid4(),
        type=type_name,
        schema_version=version,
        data=data,
        metadata={},
        recorded_at=datetime.now(UTC),
        position=Position(1, 1),
        event_hash="h",
        prev_hash="p",
    )


@pytest.fixture
def registry() -> EventRegistry:
    reg = EventRegistry()
    reg.register(HotelHeld, "HotelHeld", schema_version=3)
    reg.register_upcaster("HotelHeld", 1, lambda d: {"hold_id": d["hold"]})

    @reg.upcaster("HotelHeld", 2)
    def add_nights(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "nights": 1}

    return reg


def test_a_model_becomes_a_new_event_with_its_name_and_version(registry: EventRegistry) -> None:
    event = registry.to_new_event(HotelHeld(hold_id="H1", nights=2), metadata={"tenant": "t"})
    assert (event.type, event.schema_version) == ("HotelHeld", 3)
    assert event.data == {"hold_id": "H1", "nights": 2} and event.metadata == {"tenant": "t"}


def test_old_versions_are_upcast_in_a_chain(registry: EventRegistry) -> None:
    # given a stored v1 event, when decoded, then both upcasters ran before validation
    assert registry.decode(recorded("HotelHeld", 1, {"hold": "H1"})) == HotelHeld(
        hold_id="H1", nights=1
    )
    assert registry.decode(recorded("HotelHeld", 3, {"hold_id": "H", "nights": 4})).nights == 4  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("version", "text"),
    [(3, '{"hold_id": "H1", "nights": 1}'), (2, '{"hold_id": "H1"}'), (1, '{"hold": "H1"}')],
)
def test_a_scanned_event_decodes_from_its_text_like_a_recorded_one(
    registry: EventRegistry, version: int, text: str
) -> None:
    # current versions are validated straight from the JSON text, older ones upcast first
    scanned = ScannedEvent("s", 1, "HotelHeld", version, text)
    assert registry.decode_scanned(scanned) == HotelHeld(hold_id="H1", nights=1)


@pytest.mark.parametrize(
    ("version", "text", "says"),
    [
        (3, '{"hold_id": "H"}', "does not validate"),
        (3, "[1, 2]", "does not validate"),
        (3, "{not json", "does not validate"),
        (1, "{not json", "is not JSON"),
        (1, '"text"', "not a JSON object"),
        (1, '{"hold": 5}', "does not validate"),
    ],
)
def test_a_scanned_event_that_cannot_decode_is_a_typed_error_naming_it(
    registry: EventRegistry, version: int, text: str, says: str
) -> None:
    scanned = ScannedEvent("stream-7", 4, "HotelHeld", version, text)
    with pytest.raises(EventDecodeError, match=says) as caught:
        registry.decode_scanned(scanned)
    assert "stream-7@4" in str(caught.value)


def test_decode_failures_are_typed(registry: EventRegistry) -> None:
    with pytest.raises(UnknownEventType, match="Nope"):
        registry.decode(recorded("Nope", 1, {}))
    with pytest.raises(UnknownSchemaVersion, match="v4"):
        registry.decode(recorded("HotelHeld", 4, {}))
    with pytest.raises(EventDecodeError, match="does not validate"):
        registry.decode(recorded("HotelHeld", 3, {"hold_id": "H"}))
    with pytest.raises(EventDecodeError, match="upcaster v1->v2 failed"):
        registry.decode(recorded("HotelHeld", 1, {"wrong": "shape"}))


def test_a_missing_upcaster_step_is_an_unknown_schema_version() -> None:
    reg = EventRegistry()
    reg.register(HotelHeld, "HotelHeld", schema_version=2)
    with pytest.raises(UnknownSchemaVersion, match="no upcaster from v1"):
        reg.decode(recorded("HotelHeld", 1, {"hold": "H"}))


def test_unregistered_models_and_conflicting_registrations_fail(registry: EventRegistry) -> None:
    class Stray(BaseModel):
        x: int

    with pytest.raises(UnregisteredEventModel, match="Stray"):
        registry.to_new_event(Stray(x=1))
    with pytest.raises(RegistryConflict):
        registry.register(Stray, "HotelHeld")
    with pytest.raises(RegistryConflict):
        registry.register(HotelHeld, "HotelHeld", schema_version=4)
    registry.register(HotelHeld, "HotelHeld", schema_version=3)  # the same again is fine
