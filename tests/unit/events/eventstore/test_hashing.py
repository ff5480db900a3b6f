"""Canonical JSON and hash templates (no database)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.eventstore.hashing import (
    HASH_BODY_FIELDS,
    HASH_BODY_LAYOUTS,
    HASH_VERSION,
    body_around_version,
    canonical_json,
    chain_hash,
    hash_body,
    json_string,
    recorded_at_text,
    sorted_json,
    sorted_json_each,
)

texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=10)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
values = st.recursive(
    scalars, lambda v: st.lists(v, max_size=3) | st.dictionaries(texts, v, max_size=3), max_leaves=8
)


def test_the_hash_body_fields_are_listed_in_canonical_key_order() -> None:
    # canonical JSON sorts keys: the templates built from the list must agree with it
    assert HASH_BODY_FIELDS == HASH_BODY_LAYOUTS[HASH_VERSION]
    for layout in HASH_BODY_LAYOUTS.values():
        assert list(layout) == sorted(layout)
        assert len(set(layout)) == len(layout)


def test_layout_1_is_the_body_every_event_before_hash_versions_was_hashed_with() -> None:
    # given an event as stored before hash versions existed (its hash computed by the code
    # of that release)
    body = hash_body(
        hash_version=1, stream_id="s", stream_version=3, event_id="e", event_type="T",
        schema_version=1, data={"a": 1}, metadata={"tenant": "acme"}, tenant_id="acme",
        recorded_at=datetime(2024, 1, 2, tzinfo=UTC))
    # then layout 1 still hashes the content alone, byte for byte
    assert body == ('{"data":{"a":1},"event_id":"e","metadata":{"tenant":"acme"},'
                    '"schema_version":1,"stream_id":"s","stream_version":3,"type":"T"}')
    assert chain_hash("0" * 64, body) == (
        "a988d39c7e872660be09206f26ffd34012c8a511dde15a951222aed92bae0525")


def test_layout_2_covers_the_tenant_column_the_recording_time_and_its_own_number() -> None:
    at = datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    fields = dict(stream_id="s", stream_version=3, event_id="e", event_type="T",
                  schema_version=1, data={}, metadata={"tenant": "acme"})
    body = hash_body(hash_version=2, tenant_id="acme", recorded_at=at, **fields)
    assert json.loads(body) == {
        "data": {}, "event_id": "e", "hash_version": 2, "metadata": {"tenant": "acme"},
        "recorded_at": "2024-01-02T03:04:05.000006+00:00", "schema_version": 1,
        "stream_id": "s", "stream_version": 3, "tenant_id": "acme", "type": "T"}
    # a time read back in another zone is the same instant, the same body
    elsewhere = at.astimezone(timezone(timedelta(hours=-7)))
    assert hash_body(hash_version=2, tenant_id="acme", recorded_at=elsewhere, **fields) == body
    # and each of the two columns changes it
    assert hash_body(hash_version=2, tenant_id="other", recorded_at=at, **fields) != body
    later = at + timedelta(microseconds=1)
    assert hash_body(hash_version=2, tenant_id="acme", recorded_at=later, **fields) != body


def test_a_naive_recording_time_or_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        recorded_at_text(datetime(2024, 1, 2))  # noqa: DTZ001 - the point of the test
    with pytest.raises(KeyError):
        hash_body(hash_version=99, stream_id="s", stream_version=1, event_id="e",
                  event_type="T", schema_version=1, data={}, metadata={}, tenant_id=None,
                  recorded_at=datetime(2024, 1, 2, tzinfo=UTC))


@given(
    stream_id=texts,
    event_type=texts,
    version=st.integers(min_value=1, max_value=2**62),
    schema=st.integers(min_value=1, max_value=1000),
    data=st.dictionaries(texts, values, max_size=4),
    metadata=st.dictionaries(texts, values, max_size=2),
    tenant=st.none() | texts,
    at=st.datetimes(timezones=st.just(UTC)),
)
def test_the_body_appends_send_around_the_version_is_the_reference_body(  # noqa: PLR0913
    stream_id: str, event_type: str, version: int, schema: int, data: dict, metadata: dict,
    tenant: str | None, at: datetime,
) -> None:
    # given an event's parts as appends prepare them (canonical texts, JSON literals)
    event_id = "0b6f0a52-8c4b-4f59-9d3c-2f1f7f0c1a11"
    around = body_around_version(
        {
            "data": canonical_json(data),
            "event_id": json_string(event_id),
            "hash_version": str(HASH_VERSION),
            "metadata": canonical_json(metadata),
            "recorded_at": json_string(recorded_at_text(at)),
            "schema_version": str(schema),
            "stream_id": json_string(stream_id),
            "tenant_id": canonical_json(tenant),
            "type": json_string(event_type),
        }
    )
    # when the version is spliced in, as the append function does (before || v || after)
    spliced = around.before + str(version) + around.after
    # then it is exactly the canonical JSON of the HASH_BODY_FIELDS object verification hashes
    assert spliced == around.at(version) == hash_body(
        hash_version=HASH_VERSION,
        stream_id=stream_id,
        stream_version=version,
        event_id=event_id,
        event_type=event_type,
        schema_version=schema,
        data=data,
        metadata=metadata,
        tenant_id=tenant,
        recorded_at=at,
    )
    assert json.loads(spliced).keys() == set(HASH_BODY_FIELDS)


def test_a_body_missing_a_field_is_refused() -> None:
    with pytest.raises(KeyError):
        body_around_version({"data": "{}"})


@given(st.lists(st.dictionaries(texts, values, max_size=3), min_size=1, max_size=5))
def test_a_batch_encoded_at_once_splits_back_into_each_values_own_text(
    batch: list[dict]
) -> None:
    # given a batch of event data (any text, NUL included)
    # when it is encoded in one call
    texts_each = sorted_json_each(batch)
    # then each part is exactly that value's text, or the batch is refused as a whole
    assert texts_each is None or texts_each == [sorted_json(value) for value in batch]
    if "\\u0000" not in "".join(sorted_json(value) for value in batch):
        assert texts_each is not None


def test_a_batch_that_cannot_be_split_back_or_encoded_is_refused() -> None:
    # a value holding the separator itself, one that cannot be encoded, keys unsortable
    assert sorted_json_each([{"a": 1}, {"x": [1, "\0", 2]}, {"b": 2}]) is None
    assert sorted_json_each([{"a": 1}, {"x": object()}]) is None
    assert sorted_json_each([{1: "a", "b": 2}, {}]) is None
    assert sorted_json_each([{"b": [1.5, None]}, {}]) == ['{"b":[1.5,null]}', "{}"]


def test_sorted_json_turns_cycles_and_deep_nesting_into_value_errors() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="nested too deeply"):
        sorted_json(cycle)
    with pytest.raises(TypeError):
        sorted_json({"x": object()})


def test_canonical_json_ignores_key_order_and_float_integrality() -> None:
    assert canonical_json({"b": 1, "a": [1.0, 2]}) == canonical_json({"a": [1, 2], "b": 1})
    # jsonb prints 1e16 as 10000000000000000 and 1e308 as 1 followed by 308 zeros
    assert canonical_json(1e16) == "10000000000000000"
    assert canonical_json(1e308) == "1" + "0" * 308
    assert canonical_json(-0.0) == "0"
    assert canonical_json(0.1) == "0.1"
    assert canonical_json("é") == '"é"'


def test_canonical_json_rejects_non_finite_numbers() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": float("inf")})


def test_chain_hash_depends_on_the_predecessor() -> None:
    body = json.dumps({"a": 1})
    assert chain_hash("0" * 64, body) != chain_hash("1" * 64, body)
    assert len(chain_hash("0" * 64, body)) == 64


@given(values)
def test_sorted_json_writes_what_the_documented_encoder_writes(value: object) -> None:
    # sorted_json may call the C encoder it keeps; the text must be the documented one's
    reference = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
    assert sorted_json(value) == reference


def test_sorted_json_refuses_what_json_cannot_hold_and_nesting_it_cannot_walk() -> None:
    with pytest.raises(ValueError, match="NaN|Out of range"):
        sorted_json({"x": float("nan")})
    with pytest.raises(TypeError):
        sorted_json({"x": object()})
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        sorted_json(deep)
