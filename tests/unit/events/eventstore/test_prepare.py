"""Validation before any write (no database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from events import InvalidEvent, NewEvent
from events.eventstore.hashing import canonical_json
from events.eventstore.prepare import prepare_events

AT = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)  # when the appends record them


def test_a_valid_event_is_normalised_as_jsonb_will_return_it() -> None:
    # given data with a tuple and an int key
    (prepared,) = prepare_events(
        "s", [NewEvent("A", {"t": (1, 2), 3: "x"}, metadata={"tenant": "acme"})], 1024, AT
    )
    # then it is normalised like a JSON round trip, with an id and the tenant picked up
    assert prepared.data == {"t": [1, 2], "3": "x"}
    assert isinstance(prepared.event_id, uuid.UUID) and not prepared.id_was_given
    assert prepared.tenant_id == "acme"


@pytest.mark.parametrize(
    "data",
    [{"b": 1, "a": 2}, {"t": (1, 2)}, {3: "x", 10: "y"}, {"f": 1.0, "g": 1e16}, {"n": {"z": 0.5}}],
)
def test_the_text_sent_is_the_canonical_form_of_what_loads_back(data: dict) -> None:
    (prepared,) = prepare_events("s", [NewEvent("A", data)], 1024, AT)
    assert prepared.data_json == canonical_json(prepared.data)


@pytest.mark.parametrize(
    ("stream_id", "events", "fragment"),
    [
        ("s", [NewEvent("A", {"x": {1, 2}})], "not JSON-serialisable"),
        ("s", [NewEvent("A", {"x": float("inf")})], "not JSON-serialisable"),
        ("s", [NewEvent("A", {"x": "\ud800"})], "not JSON-serialisable"),
        ("s", [NewEvent("A", {"k\x00": 1})], "NUL"),
        ("s", [NewEvent("A", {}, metadata={"m": object()})], "metadata is not JSON"),
        ("  ", [NewEvent("A", {})], "stream id must not be empty"),
        ("s\x00", [NewEvent("A", {})], "NUL"),
        ("s", [NewEvent("A" * 201, {})], "limit is 200"),
        ("s", [NewEvent("A", {"blob": "é" * 600})], "limit is 1024"),
        ("s", NewEvent("A", {}), "sequence"),
        ("s", ["A"], "not a NewEvent"),
        ("s", [NewEvent("A", {}, schema_version=True)], "schema_version"),
    ],
)
def test_bad_input_names_what_is_wrong(stream_id: str, events: object, fragment: str) -> None:
    with pytest.raises(InvalidEvent, match=fragment):
        prepare_events(stream_id, events, 1024, AT)  # type: ignore[arg-type]


def _nested(levels: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def _circular() -> dict[str, object]:
    loop: dict[str, object] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"x": _nested(128)}, "nested more than 128 levels"),
        ({"x": _nested(990, 1.5)}, "nested"),  # which check fires depends on the stack
        ({"x": _nested(50_000)}, "nested too deeply"),
        (_circular(), "nested too deeply"),
    ],
)
def test_data_too_deep_for_readers_or_circular_is_refused_with_a_typed_error(
    data: dict[str, object], fragment: str
) -> None:
    # every reader of the log must be able to walk an event back: deep nesting and cycles
    # are InvalidEvent, never a RecursionError from inside the encoder or a walk
    with pytest.raises(InvalidEvent, match=fragment):
        prepare_events("s", [NewEvent("A", data)], 10 * 1024 * 1024, AT)


def test_data_nested_up_to_the_limit_is_stored_as_is() -> None:
    (prepared,) = prepare_events("s", [NewEvent("A", {"x": _nested(127)})], 1024, AT)
    assert prepared.data_json == '{"x":' + "[" * 127 + "1" + "]" * 127 + "}"


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"x": [1, "\0", 2]}, "event #1 (T) data contains a NUL character"),
        ({"x": object()}, "event #1 (T) data is not JSON-serialisable"),
        ({"x": float("nan")}, "event #1 (T) data is not JSON-serialisable"),
    ],
)
def test_a_batch_names_the_event_whose_data_is_refused(bad: dict, fragment: str) -> None:
    # given a batch whose second event's data cannot be stored (its data encoded with the
    # batch's, then one by one)
    events = [NewEvent("T", {"a": 1}), NewEvent("T", bad), NewEvent("T", {"b": 2})]
    # when it is prepared, then the error names that event
    with pytest.raises(InvalidEvent, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        prepare_events("s", events, 1024, AT)


def test_a_batch_is_prepared_as_each_of_its_events_alone() -> None:
    # given a batch mixing types, floats, unsortable-free nesting and empty data
    events = [
        NewEvent("A", {"b": 1.0, "a": [2, {"z": None}]}, metadata={"tenant": "t"}),
        NewEvent("B", {}),
        NewEvent("A", {"s": "ü\u2028"}, schema_version=2),
    ]
    ids = [uuid.uuid4() for _ in events]
    batch = [
        NewEvent(e.type, e.data, event_id=i, metadata=e.metadata, schema_version=e.schema_version)
        for e, i in zip(events, ids, strict=True)
    ]
    # when prepared together and one at a time, then every prepared field is the same
    together = prepare_events("s", batch, 1 << 20, AT)
    alone = [prepare_events("s", [event], 1 << 20, AT)[0] for event in batch]
    assert together == alone
