"""Canonical JSON and the per-stream hash chain.

The hash must be recomputable from what PostgreSQL gives back, and jsonb changes the text:
it reorders keys and prints numbers as ``numeric``. So the hashed form is canonical JSON
(sorted keys, no spaces, UTF-8) of the value *as it loads back*: a float with an integral
value loads back as an int whose digits are the float's shortest repr (``1e16`` comes back
as ``10000000000000000``), so canonically every integral float is that int. Other floats
survive the round trip exactly (shortest repr in, same decimal out, same float back).

An event's hash is ``sha256(prev_hash || body)``, where the body is the canonical JSON of
the object whose keys are the fields its **hash version** lists in :data:`HASH_BODY_LAYOUTS`
— the one definition of what a hash covers. Each event stores its hash version
(``eventstore.events.hash_version``), so an event keeps verifying with the body it was
hashed with: version 1 (every event before events migration 0011) covers the content;
version 2, which appends write now, also covers the tenant column, the time the event was
recorded and the version number itself. Appends send the body split around the stream
version (the one field a server-side append learns only under the head lock); the database
splices the version in and never names a field itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, NamedTuple, cast

from events.eventstore.model import RecordedEvent

HASH_BODY_LAYOUTS: Final[Mapping[int, tuple[str, ...]]] = {
    # The content only: every event stored before events migration 0011.
    1: ("data", "event_id", "metadata", "schema_version", "stream_id", "stream_version",
        "type"),
    # Also what a reader decides with beside the content: the tenant column (which tenant's
    # reads see the event) and the time it was recorded; and the layout's own number, so a
    # body of one layout is never the body of another.
    2: ("data", "event_id", "hash_version", "metadata", "recorded_at", "schema_version",
        "stream_id", "stream_version", "tenant_id", "type"),
}
"""What an event's hash covers besides its predecessor, by hash version, each in canonical
(sorted) key order. A stored event is verified with the layout of its own version."""

HASH_VERSION: Final = 2
"""The hash version appends write."""

HASH_BODY_FIELDS: Final = HASH_BODY_LAYOUTS[HASH_VERSION]
"""What the hash of an event appended now covers, in canonical (sorted) key order."""

# Built once: json.dumps(**options) would build this per call. No cycle markers: a cycle,
# like nesting too deep for the encoder, ends in RecursionError, which sorted_json turns
# into ValueError.
_CANONICAL = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    check_circular=False,
)


def _kept_c_encoder() -> Callable[[Any, int], list[str]] | None:
    """The C encoder ``_CANONICAL.encode`` builds on every call, built once, or None.

    ``json.encoder.c_make_encoder`` is undocumented, though its arguments have not changed
    since Python 2.7; building it per call was ~0.7 us of the ~2 us a small event's data
    costs to encode, and ~0.005 of the single-event append's ratio to a raw INSERT
    (``scripts/bench_store.py``; issue 21's target is 0.8). So it is used only when it
    builds and writes exactly what the documented encoder writes for a sample; otherwise
    (another interpreter, another signature) sorted_json calls ``_CANONICAL.encode``.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    sample: dict[str, Any] = {"b": [1, -2.5, True, None, "é\u0000\"", {"y": {}, "x": []}], "a": "z"}
    try:
        encoder = make(None, _CANONICAL.default, json.encoder.encode_basestring, None,
                       _CANONICAL.key_separator, _CANONICAL.item_separator, True, False, False)
        written = "".join(encoder(sample, 0))
    except (TypeError, ValueError):
        return None
    if written != _CANONICAL.encode(sample):
        return None
    return cast(Callable[[Any, int], list[str]], encoder)


_C_CANONICAL: Final = _kept_c_encoder()


def json_string(text: str) -> str:
    """The JSON string literal of ``text``, exactly as canonical_json writes it."""
    return _CANONICAL.encode(text)


def sorted_json(value: Any) -> str:
    """Key-sorted, space-free JSON of any value, without canonicalising numbers.

    TypeError for what JSON cannot hold, ValueError for NaN or infinities, a cycle, or
    nesting too deep to encode (never a RecursionError)."""
    try:
        if _C_CANONICAL is not None:
            return "".join(_C_CANONICAL(value, 0))
        return _CANONICAL.encode(value)
    except RecursionError:
        raise ValueError("nested too deeply (or circular)") from None


# One encoding of a whole batch, split back per value: json.JSONEncoder.encode builds its
# C encoder on every call, ~1 us of the ~2.3 us a small event's data costs to encode
# alone (100-event batches: 136 vs 232 us). Between the values goes a string holding NUL,
# written "\u0000"; a value whose text holds that separator too splits into more parts,
# and the batch is refused.
_BETWEEN: Final = "\0"
_BETWEEN_TEXT: Final = ',"\\u0000",'


def sorted_json_each(values: Sequence[Any]) -> list[str] | None:
    """:func:`sorted_json` of each value, in one encoder call; None when any value fails
    to encode or the texts cannot be split back exactly (then encode one by one)."""
    batch: list[Any] = [_BETWEEN] * (2 * len(values) - 1)
    batch[::2] = values
    try:
        texts = _CANONICAL.encode(batch)[1:-1].split(_BETWEEN_TEXT)
    except (TypeError, ValueError, RecursionError):
        return None
    return texts if len(texts) == len(values) else None


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


def recorded_at_text(at: datetime) -> str:
    """The text a hash body holds for a recording time: UTC, to the microsecond (what a
    ``timestamptz`` keeps), the same whatever time zone the value was read back in."""
    if at.tzinfo is None:
        raise ValueError("a recording time must be timezone-aware")
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def hash_body(  # noqa: PLR0913 - the fields a body may hold, named
    *,
    hash_version: int,
    stream_id: str,
    stream_version: int,
    event_id: str,
    event_type: str,
    schema_version: int,
    data: Any,
    metadata: Any,
    tenant_id: str | None,
    recorded_at: datetime,
) -> str:
    """The reference body of ``hash_version``'s layout: canonical JSON of the object of its
    :data:`HASH_BODY_LAYOUTS` fields, from loaded values (``event_id`` is the UUID's text).
    Verification hashes this; KeyError for a version no layout defines."""
    layout = HASH_BODY_LAYOUTS[hash_version]
    values = {
        "data": data,
        "event_id": event_id,
        "metadata": metadata,
        "schema_version": schema_version,
        "stream_id": stream_id,
        "stream_version": stream_version,
        "type": event_type,
    }
    if "tenant_id" in layout:
        values["tenant_id"] = tenant_id
    if "recorded_at" in layout:
        values["recorded_at"] = recorded_at_text(recorded_at)
    if "hash_version" in layout:
        values["hash_version"] = hash_version
    # Exactly the listed fields (a missing one is a KeyError), in canonical order.
    return canonical_json({field: values[field] for field in layout})


# The same layout as two positional %-templates over each field's JSON text (the fastest
# str formatting here), split where the version goes: the fields before it, and the fields
# after it. itemgetter takes the texts out of the mapping in HASH_BODY_FIELDS order,
# without naming a field again.
_AROUND_VERSION: Final = tuple(field for field in HASH_BODY_FIELDS if field != "stream_version")
_TEXTS_IN_ORDER: Final = operator.itemgetter(*_AROUND_VERSION)
_VERSION_AT: Final = HASH_BODY_FIELDS.index("stream_version")
_BEFORE_TEMPLATE: Final = (
    "{" + "".join(f'"{field}":%s,' for field in HASH_BODY_FIELDS[:_VERSION_AT])
    + '"stream_version":'
)
_AFTER_TEMPLATE: Final = (
    "".join(f',"{field}":%s' for field in HASH_BODY_FIELDS[_VERSION_AT + 1 :]) + "}"
)


class BodyAroundVersion(NamedTuple):
    """An event's hash body without its stream version: the text before it and after it."""

    before: str
    after: str

    def at(self, stream_version: int) -> str:
        """The whole body for the event stored at ``stream_version``."""
        return f"{self.before}{stream_version}{self.after}"


def body_around_version(texts: Mapping[str, str]) -> BodyAroundVersion:
    """The hash body split at the version, from the canonical JSON text of every other
    field of :data:`HASH_BODY_FIELDS` (the fast form of :func:`hash_body`, for appends)."""
    texts_in_order = _TEXTS_IN_ORDER(texts)
    return BodyAroundVersion(_BEFORE_TEMPLATE % texts_in_order[:_VERSION_AT],
                             _AFTER_TEMPLATE % texts_in_order[_VERSION_AT:])


def chain_hash(prev_hash: str, body: str) -> str:
    """sha256 hex of the predecessor's hash followed by this event's canonical body."""
    return hashlib.sha256((prev_hash + body).encode("utf-8")).hexdigest()


def recorded_event_hash(event: RecordedEvent) -> str:
    """Recompute a recorded event's hash from its stored fields and stored prev_hash, with
    the layout of its hash version (KeyError for a version no layout defines)."""
    body = hash_body(
        hash_version=event.hash_version,
        stream_id=event.stream_id,
        stream_version=event.stream_version,
        event_id=str(event.event_id),
        event_type=event.type,
        schema_version=event.schema_version,
        data=event.data,
        metadata=event.metadata,
        tenant_id=event.tenant_id,
        recorded_at=event.recorded_at,
    )
    return chain_hash(event.prev_hash, body)
