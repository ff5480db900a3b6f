"""Validation and normalisation of events before any write: bad input fails here, typed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple, cast

from events.errors import InvalidEvent
from events.eventstore.hashing import (
    HASH_VERSION,
    BodyAroundVersion,
    body_around_version,
    canonical_json,
    contains_float,
    json_string,
    recorded_at_text,
    sorted_json,
    sorted_json_each,
)
from events.eventstore.model import NewEvent, metadata_tenant, new_event_ids
from saga_core.keys import json_value_problem, text_argument_problem

MAX_STREAM_ID_LENGTH: Final = 200
"""Longest stream id accepted, in characters."""

MAX_TYPE_LENGTH: Final = 200
"""Longest event type name accepted, in characters."""

DEFAULT_MAX_EVENT_BYTES: Final = 1024 * 1024
"""Default limit on an event's serialized data + metadata, in UTF-8 bytes."""

MAX_JSON_DEPTH: Final = 128
"""How deeply an event's data or metadata may nest arrays and objects, so that every
reader of the log (json decoding, folds, hashing) can walk it back. Above the limit saga
values get (saga_core.keys.MAX_JSON_DEPTH, 100), so a saga value fits in its event."""



class PreparedEvent(NamedTuple):
    """A validated event: normalised JSON (as it will load back) and its canonical text.

    A named tuple rather than a frozen dataclass: one is built per appended event, and a
    tuple is built several times faster.
    """

    event_id: uuid.UUID
    id_text: str
    type: str
    schema_version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    data_json: str
    metadata_json: str
    columns_json: str
    tenant_id: str | None
    id_was_given: bool
    body: BodyAroundVersion
    recorded_at: datetime
    recorded_at_text: str


def check_name(what: str, value: object, limit: int, *, index: int | None = None) -> str:
    """A non-blank text of at most ``limit`` characters PostgreSQL can store, or
    InvalidEvent naming what is wrong (``event #3 type ...`` with ``index``)."""
    problem = text_argument_problem(what, value, limit)
    if problem is None:
        return cast(str, value)  # a str: text_argument_problem checked
    raise InvalidEvent(problem if index is None else f"event #{index} {problem}")


# Built once: json.dumps(**options) would construct an encoder on every call.
_PLAIN = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _normalised_json(
    what: str, value: object, encoded: str | None = None
) -> tuple[dict[str, Any], str]:
    """The JSON object as PostgreSQL will hand it back, and its canonical text
    (``encoded``: its sorted_json, when the batch already has it)."""
    if type(value) is not dict and not isinstance(value, Mapping):
        raise InvalidEvent(f"{what} must be a JSON object (a mapping), got {type(value).__name__}")
    if not value:
        return {}, "{}"
    try:
        sorted_input = True
        if encoded is not None:
            text = encoded
        else:
            try:
                text = sorted_json(value)
            except TypeError:  # keys of mixed types cannot be sorted; plain may still work
                text, sorted_input = _PLAIN.encode(value), False
        if not text.isascii():
            text.encode("utf-8")  # lone surrogates cannot be stored
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidEvent(f"{what} is not JSON-serialisable: {exc}") from None
    # Only a text with that many brackets can nest that deep: the walk is rarely needed.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        problem = json_value_problem(value, MAX_JSON_DEPTH)
        if problem is not None:
            raise InvalidEvent(f"{what} is {problem}")
    # Fast path: plain data (str keys; str, int, bool, None, dict and list values, no
    # floats) loads back equal and is already canonical as encoded; copy it directly.
    loaded = _plain_copy(value) if sorted_input else None
    if loaded is not None:
        canonical = text
    else:
        # Round-tripping through json gives keys as strings and tuples as lists, like
        # jsonb will.
        loaded = json.loads(text)
        if sorted_input and not contains_float(loaded) and loaded == value:
            canonical = text
        else:
            canonical = canonical_json(loaded)
    if "\\u0000" in canonical:  # cheap filter; the walk decides (a "\\u0000" text is fine)
        _reject_nul(what, loaded)
    return loaded, canonical


_PLAIN_LEAVES: Final = frozenset({str, int, bool, type(None)})


def _plain_copy(value: Any) -> Any:
    """A deep copy of plain JSON data (exact str/int/bool/None leaves in dicts and lists
    with str keys), or None when anything else occurs (floats, tuples, subclasses)."""
    kind = type(value)
    if kind is dict:
        copied: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                return None
            if type(item) in _PLAIN_LEAVES:
                copied[key] = item
            else:
                inner = _plain_copy(item)
                if inner is None:
                    return None
                copied[key] = inner
        return copied
    if kind is list:
        items: list[Any] = []
        for item in value:
            if type(item) in _PLAIN_LEAVES:
                items.append(item)
            else:
                inner = _plain_copy(item)
                if inner is None:
                    return None
                items.append(inner)
        return items
    return None


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _reject_nul(what: str, value: Any) -> None:
    # jsonb cannot store U+0000 in strings; say so before the database does.
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidEvent(f"{what} contains a NUL character, which jsonb cannot store")
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_nul(what, key)
            _reject_nul(what, item)
    elif isinstance(value, list):
        for item in value:
            _reject_nul(what, item)


# Names already checked, each with its JSON text: an application appends a few event
# types over and over, and a saga appends to its stream at every step. Bounded (emptied
# when full) against a run of distinct names.
_TYPE_JSON: dict[str, str] = {}
_STREAM_JSON: dict[str, str] = {}
_NAMES_KEPT: Final = 4096


def _remembered(checked: dict[str, str], name: str) -> str:
    """The JSON text of a name just checked, kept in ``checked`` for the next time."""
    text = json_string(name)
    if len(checked) >= _NAMES_KEPT:
        checked.clear()
    checked[name] = text
    return text


def _event_id(value: uuid.UUID | str) -> tuple[uuid.UUID, bool]:
    if isinstance(value, uuid.UUID):
        return value, True
    try:
        return uuid.UUID(str(value)), True
    except ValueError:
        raise InvalidEvent(f"event id {value!r} is not a UUID") from None


class _Recording(NamedTuple):
    """When an append is recorded, as a value and as the text its hash bodies and rows hold."""

    at: datetime
    text: str


def prepare_events(
    stream_id: str, events: Sequence[NewEvent], max_event_bytes: int, recorded_at: datetime
) -> list[PreparedEvent]:
    """Validate a batch for one stream and normalise it, or raise InvalidEvent naming why.

    ``recorded_at``: when the append records them (the store's clock, timezone-aware): the
    time every event of the batch is stored with, and which their hashes cover."""
    recording = _Recording(recorded_at, recorded_at_text(recorded_at))
    stream_json = _STREAM_JSON.get(stream_id) if type(stream_id) is str else None
    if stream_json is None:
        stream_json = _remembered(
            _STREAM_JSON, check_name("stream id", stream_id, MAX_STREAM_ID_LENGTH)
        )
    # A list (what the stores pass) skips the ABC check, which costs more than the rest of
    # this block for one event.
    if type(events) is not list and (
        isinstance(events, NewEvent) or not isinstance(events, Sequence)
    ):
        raise InvalidEvent("events must be a sequence of NewEvent")
    if not events:
        raise InvalidEvent(f"append to {stream_id!r} needs at least one event")
    if len(events) == 1:  # an append per saga step: the common case, without batch work
        (event,) = events
        if not isinstance(event, NewEvent):
            raise InvalidEvent(f"event #0 is a {type(event).__name__}, not a NewEvent")
        fresh = iter(new_event_ids(1)) if event.event_id is None else iter(())
        return [_prepare_one(stream_json, 0, event, max_event_bytes, fresh,
                             recording=recording, data_text=None)]
    for index, event in enumerate(events):
        if not isinstance(event, NewEvent):
            raise InvalidEvent(f"event #{index} is a {type(event).__name__}, not a NewEvent")
    # Fresh ids for the events that bring none, drawn at once (one clock and random read).
    fresh = iter(new_event_ids(sum(1 for event in events if event.event_id is None)))
    # A batch's data encoded in one call (see sorted_json_each); one by one if that fails,
    # which also names the event at fault.
    texts = sorted_json_each([event.data for event in events])
    prepared = [
        _prepare_one(
            stream_json,
            index,
            event,
            max_event_bytes,
            fresh,
            recording=recording,
            data_text=None if texts is None else texts[index],
        )
        for index, event in enumerate(events)
    ]
    given = [event.event_id for event in prepared if event.id_was_given]
    if len(given) > 1 and len(set(given)) < len(given):
        twice = next(event_id for event_id in given if given.count(event_id) > 1)
        raise InvalidEvent(f"event id {twice} appears twice in one append")
    return prepared


def _prepare_one(
    stream_json: str,
    index: int,
    event: NewEvent,
    limit: int,
    fresh: Iterator[uuid.UUID],
    *,
    recording: _Recording,
    data_text: str | None,
) -> PreparedEvent:
    event_type = event.type
    type_json = _TYPE_JSON.get(event_type) if type(event_type) is str else None
    if type_json is None:
        event_type = check_name("type", event_type, MAX_TYPE_LENGTH, index=index)
        type_json = _remembered(_TYPE_JSON, event_type)
    schema_version = event.schema_version
    if type(schema_version) is not int or not 1 <= schema_version <= 2**31 - 1:
        _refuse_schema_version(index, event_type, schema_version)
    event_id, given = (next(fresh), False) if event.event_id is None else _event_id(event.event_id)
    # Error labels are formatted only on failure: this runs for every appended event.
    try:
        data, data_json = _normalised_json("data", event.data, data_text)
        metadata, metadata_json = (
            _normalised_json("metadata", event.metadata) if event.metadata else ({}, "{}")
        )
    except InvalidEvent as exc:
        raise InvalidEvent(f"event #{index} ({event_type}) {exc}") from None
    except RecursionError:  # the walks below the encoder recurse too
        raise InvalidEvent(f"event #{index} ({event_type}) is nested too deeply") from None
    size = _utf8_length(data_json) + (2 if metadata_json == "{}" else _utf8_length(metadata_json))
    if size > limit:
        raise InvalidEvent(
            f"event #{index} ({event_type}) is {size} bytes serialized; the limit is {limit}"
        )
    tenant_id = metadata_tenant(metadata)
    id_text = str(event_id)
    tenant_json = "null" if tenant_id is None else json_string(tenant_id)
    # The stored columns as the members of a JSON object; both append statements send them
    # (and the recording time and hash version once per append, as parameters).
    columns_json = (
        f'"id":"{id_text}","type":{type_json},"sv":{schema_version},'
        f'"data":{data_json},"meta":{metadata_json},"tenant":{tenant_json}'
    )
    body = body_around_version(
        {
            "data": data_json,
            "event_id": f'"{id_text}"',
            "hash_version": str(HASH_VERSION),
            "metadata": metadata_json,
            # The recording time's text is digits and punctuation: a JSON string as it stands.
            "recorded_at": f'"{recording.text}"',
            "schema_version": str(schema_version),
            "stream_id": stream_json,
            "tenant_id": tenant_json,
            "type": type_json,
        }
    )
    return PreparedEvent(
        event_id,
        id_text,
        event_type,
        schema_version,
        data,
        metadata,
        data_json,
        metadata_json,
        columns_json,
        tenant_id,
        given,
        body,
        recording.at,
        recording.text,
    )


def _refuse_schema_version(index: int, event_type: str, schema_version: object) -> None:
    where = f"event #{index} ({event_type})"
    if isinstance(schema_version, bool) or not isinstance(schema_version, int):
        raise InvalidEvent(f"{where} schema_version must be an int")
    if not 1 <= schema_version <= 2**31 - 1:
        raise InvalidEvent(f"{where} schema_version must be >= 1")
