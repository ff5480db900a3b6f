"""Canonical JSON and the per-stream hash chain.

The hash must be recomputable from what PostgreSQL gives back, and jsonb changes the text:
it reorders keys and prints numbers as ``numeric``. So the hashed form is canonical JSON
(sorted keys, no spaces, UTF-8) of the value *as it loads back*: a float with an integral
value loads back as an int whose digits are the float's shortest repr (``1e16`` comes back
as ``10000000000000000``), so canonically every integral float is that int. Other floats
survive the round trip exactly (shortest repr in, same decimal out, same float back).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from events.model import RecordedEvent

# Built once: json.dumps(**options) would construct an encoder on every call.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)

json_string: Callable[[str], str] = json.encoder.encode_basestring
"""JSON string literal of a str, exactly as canonical_json writes it (fast path)."""




def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder behind _CANONICAL.encode, built once: encode() builds a new one per call,
# which is half the cost of encoding an event's data. No cycle markers (a cycle, like
# nesting too deep for the encoder, ends in RecursionError, turned into ValueError below).
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_C_SORTED = (
    _c_make_encoder(None, _refuse, json.encoder.encode_basestring, None, ":", ",", True,
                    False, False)
    if _c_make_encoder is not None else None
)


def sorted_json(value: Any) -> str:
    """Key-sorted, space-free JSON of any value, without canonicalising numbers.

    TypeError for what JSON cannot hold, ValueError for NaN or infinities, a cycle, or
    nesting too deep to encode (never a RecursionError)."""
    try:
        if _C_SORTED is None:
            return _CANONICAL.encode(value)
        return "".join(_C_SORTED(value, 0))
    except RecursionError:
        raise ValueError("nested too deeply (or circular)") from None


def contains_float(value: Any) -> bool:
    """Whether a loaded JSON value holds a float anywhere (canonical form may differ)."""
    kind = type(value)
    if kind is dict:
        for item in value.values():
            if type(item) is float or (type(item) in (dict, list) and contains_float(item)):
                return True
        return False
    if kind is list:
        for item in value:
            if type(item) is float or (type(item) in (dict, list) and contains_float(item)):
                return True
        return False
    return kind is float


def canonical_json(value: Any) -> str:
    """Key-sorted, space-free JSON of an already-normalised value, stable across jsonb."""
    return _CANONICAL.encode(_canonical_numbers(value))


def _canonical_numbers(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value  # the common leaves first: this walk runs on every append
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not valid JSON")
        # jsonb prints an integral float's repr digits as an integer literal.
        return int(Decimal(repr(value))) if value.is_integer() else value
    if isinstance(value, dict):
        return {k: _canonical_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical_numbers(v) for v in value]
    return value


def hash_body(
    *,
    stream_id: str,
    stream_version: int,
    event_id: str,
    event_type: str,
    schema_version: int,
    data: Any,
    metadata: Any,
) -> str:
    """Canonical JSON of everything an event's hash covers (besides its predecessor), from
    loaded values (``event_id`` is the UUID's text)."""
    return hash_body_text(
        stream_json=json_string(stream_id),
        stream_version=stream_version,
        event_id=event_id,
        type_json=json_string(event_type),
        schema_version=schema_version,
        data_json=canonical_json(data),
        metadata_json=canonical_json(metadata),
    )


def hash_body_text(
    *,
    stream_json: str,
    stream_version: int,
    event_id: str,
    type_json: str,
    schema_version: int,
    data_json: str,
    metadata_json: str,
) -> str:
    """The one layout of a hash body (canonical key order, no spaces) from texts already
    canonical: JSON literals of the stream id and type, canonical data and metadata. The
    append SQL (eventstore.append_events, events.appending) assembles the same text."""
    return (
        f'{{"data":{data_json},"event_id":"{event_id}","metadata":{metadata_json},'
        f'"schema_version":{schema_version},"stream_id":{stream_json},'
        f'"stream_version":{stream_version},"type":{type_json}}}'
    )


def chain_hash(prev_hash: str, body: str) -> str:
    """sha256 hex of the predecessor's hash followed by this event's canonical body."""
    return hashlib.sha256((prev_hash + body).encode("utf-8")).hexdigest()


def recorded_event_hash(event: RecordedEvent) -> str:
    """Recompute a recorded event's hash from its stored fields and stored prev_hash."""
    body = hash_body(
        stream_id=event.stream_id,
        stream_version=event.stream_version,
        event_id=str(event.event_id),
        event_type=event.type,
        schema_version=event.schema_version,
        data=event.data,
        metadata=event.metadata,
    )
    return chain_hash(event.prev_hash, body)
