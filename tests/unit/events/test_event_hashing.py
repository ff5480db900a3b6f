"""Canonical JSON and hash templates (no database)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.hashing import canonical_json, chain_hash, hash_body, json_string

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


@given(
    stream_id=texts,
    event_type=texts,
    version=st.integers(min_value=1, max_value=2**62),
    schema=st.integers(min_value=1, max_value=1000),
    data=st.dictionaries(texts, values, max_size=4),
    metadata=st.dictionaries(texts, values, max_size=2),
)
def test_the_body_the_database_assembles_is_the_canonical_body(
    stream_id: str, event_type: str, version: int, schema: int, data: dict, metadata: dict
) -> None:
    # given an event's parts as the client sends them (canonical texts, JSON literals)
    event_id = "0b6f0a52-8c4b-4f59-9d3c-2f1f7f0c1a11"
    # when they are concatenated the way eventstore.append_events does it
    assembled = (
        '{"data":' + canonical_json(data) + ',"event_id":' + json_string(event_id)
        + ',"metadata":' + canonical_json(metadata) + ',"schema_version":' + str(schema)
        + ',"stream_id":' + json_string(stream_id) + ',"stream_version":' + str(version)
        + ',"type":' + json_string(event_type) + "}"
    )  # fmt: skip
    # then it is exactly the canonical body Python hashes when verifying
    assert assembled == hash_body(
        stream_id=stream_id,
        stream_version=version,
        event_id=event_id,
        event_type=event_type,
        schema_version=schema,
        data=data,
        metadata=metadata,
    )


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
