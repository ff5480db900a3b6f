"""The event store's rules that hold whatever the storage, as pure functions: what an
expected version means, how models become envelopes, what a retried append repeats, which
stream ids a multi-stream read takes.

``events.eventstore.postgres`` (PostgreSQL), ``events.eventstore.reading`` and
``events.eventstore.memory`` all apply
these, so each rule has one owner and both stores keep it alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final
from uuid import UUID

from pydantic import BaseModel

from events.errors import EventIdConflict, InvalidArgument, InvalidEvent, UnregisteredEventModel
from events.eventstore.hashing import canonical_json
from events.eventstore.model import (
    ANY,
    NO_STREAM,
    AppendResult,
    ExpectedVersion,
    NewEvent,
    RecordedEvent,
)
from events.eventstore.prepare import PreparedEvent

if TYPE_CHECKING:
    from events.eventstore.registry import EventRegistry

MAX_STREAMS_PER_READ: Final = 10_000
"""The most streams one read_streams call takes (read more in chunks)."""


def expected_code(expected: ExpectedVersion) -> int:
    """-1 any, 0 no stream, n exactly n (the SQL function's convention), or InvalidEvent."""
    if expected is ANY:
        return -1
    if expected is NO_STREAM:
        return 0
    if isinstance(expected, bool) or not isinstance(expected, int) or not 0 <= expected < 2**63:
        raise InvalidEvent(f"expected_version must be ANY, NO_STREAM or an int >= 0: {expected!r}")
    return expected


def new_events(
    registry: EventRegistry | None, events: Sequence[NewEvent | BaseModel]
) -> list[NewEvent]:
    """The envelopes of an append's events (registered models converted by ``registry``)."""
    if type(events) is not list and (
        isinstance(events, NewEvent | BaseModel) or not isinstance(events, Sequence)
    ):
        raise InvalidEvent("events must be a sequence of NewEvent or registered models")
    converted: list[NewEvent] = []
    for event in events:
        if type(event) is NewEvent:  # before the model check: BaseModel's is an ABC's
            converted.append(event)
        elif isinstance(event, BaseModel):
            if registry is None:
                raise UnregisteredEventModel(
                    f"{type(event).__name__} is a model but this store has no registry"
                )
            converted.append(registry.to_new_event(event))
        else:
            converted.append(event)
    return converted


def original_append(
    stream_id: str, prepared: Sequence[PreparedEvent], stored: Mapping[UUID, RecordedEvent]
) -> AppendResult | None:
    """The earlier append a failed one repeats, given the stored events among its ids:
    None when it repeats none, the first result when it repeats all with the same content,
    EventIdConflict otherwise (other content, or a batch mixing stored and new ids)."""
    if not any(event.id_was_given for event in prepared) or not stored:
        return None
    for event in prepared:
        original = stored.get(event.event_id)
        if original is None:
            raise EventIdConflict(
                next(iter(stored)),
                "stored by an earlier append that did not contain "
                f"event {event.event_id}; a retry must repeat the same batch",
            )
        if (original.stream_id, original.type, original.schema_version) != (
            stream_id,
            event.type,
            event.schema_version,
        ) or canonical_json([original.data, original.metadata]) != canonical_json(
            [event.data, event.metadata]
        ):
            raise EventIdConflict(event.event_id, "with different content")
    events = tuple(sorted(stored.values(), key=lambda e: e.stream_version))
    return AppendResult(
        stream_id=stream_id, version=events[-1].stream_version, events=events, duplicate=True
    )


def checked_stream_list(stream_ids: object) -> Sequence[str]:
    """A multi-stream read's ids as a sequence within the limit, or InvalidArgument."""
    if isinstance(stream_ids, str) or not isinstance(stream_ids, Sequence):
        raise InvalidArgument("stream ids must be a sequence of stream id strings")
    if len(stream_ids) > MAX_STREAMS_PER_READ:
        raise InvalidArgument(
            f"{len(stream_ids)} stream ids in one read; the limit is {MAX_STREAMS_PER_READ}"
        )
    return stream_ids
