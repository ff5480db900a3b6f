"""The envelope: events to append, events as recorded, global positions, append results."""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple
from uuid import UUID, SafeUUID

from events.errors import InvalidArgument


class StreamState(enum.Enum):
    """Expected-version constants that are not a plain version number."""

    ANY = "any"
    NO_STREAM = "no stream"

    def __str__(self) -> str:
        return self.value


ANY: Final = StreamState.ANY
"""Append whatever the stream's current version is (no concurrency check)."""

NO_STREAM: Final = StreamState.NO_STREAM
"""Append only if the stream has no events yet (same as expected_version=0)."""

ExpectedVersion = int | StreamState
"""The stream's current version (0 = new stream), ``ANY`` or ``NO_STREAM``."""

GENESIS_HASH: Final = "0" * 64
"""The predecessor hash of every stream's first event."""


class DueTimeChange(enum.Enum):
    """What an append does to the stream's due time when it is given no new one."""

    KEEP = "keep"

    def __str__(self) -> str:
        return self.value


KEEP_DUE: Final = DueTimeChange.KEEP
"""Leave the stream's due time as it is (an append's default)."""

DueTime = datetime | None | DueTimeChange
"""An append's wish for the stream's due time: a datetime sets it (the next wake-up the
appender asks for), None clears it (nothing to wake up for), ``KEEP_DUE`` leaves it."""

EARLIEST: Final = datetime.min.replace(tzinfo=UTC)
"""How a due time of ``-infinity`` (due before anything else) reads back."""


class DueStream(NamedTuple):
    """A stream head's due time at a version: what :meth:`EventStore.due_streams` finds, and
    what :meth:`EventStore.defer_due` sets (None clears) if the head is still there."""

    stream_id: str
    version: int
    due_at: datetime | None


Clock = Callable[[], datetime]
"""What tells a store the time (``recorded_at``); a test passes its own."""


def utc_now() -> datetime:
    """The current time in UTC (a store's default clock: what ``recorded_at`` says)."""
    return datetime.now(UTC)


def new_event_id() -> UUID:
    """A fresh time-ordered UUID (version 7: 48-bit Unix milliseconds, then 74 random bits).

    Random (version 4) ids scatter inserts over the whole event_id index; on a large log
    every append then dirties a cold leaf page (a full-page image in the WAL after each
    checkpoint). Time-ordered ids append at the index's right edge instead.
    """
    return new_event_ids(1)[0]


_new = object.__new__
_set = object.__setattr__
_UNKNOWN_SAFETY: Final = SafeUUID.unknown  # an enum member's lookup costs per access

_VERSION_7_MASK: Final = ~(0xF << 76) & ~(0x3 << 62)
_VERSION_7_BITS: Final = 0x7 << 76 | 0x2 << 62  # version 7, RFC 4122 variant


class _Noise(threading.local):
    """This thread's unused bytes of the system's random source, read in blocks: a read
    per append is a system call, and appends are made one per saga step."""

    block = b""
    at = 0


_NOISE: Final = _Noise()
_NOISE_BLOCK: Final = 4096


def _forget_noise() -> None:
    # A forked child holds a copy of its parent's unused bytes: it must not use them too.
    _NOISE.block, _NOISE.at = b"", 0


os.register_at_fork(after_in_child=_forget_noise)


def _random_bytes(size: int) -> bytes:
    """``size`` bytes from the system's random source (``os.urandom``), never given twice
    in this process or a fork of it."""
    noise = _NOISE
    at = noise.at
    if at + size > len(noise.block):
        if size > _NOISE_BLOCK:
            return os.urandom(size)
        noise.block, at = os.urandom(_NOISE_BLOCK), 0
    noise.at = at + size
    return noise.block[at : at + size]


def new_event_ids(count: int) -> list[UUID]:
    """``count`` fresh version-7 ids (as :func:`new_event_id`) from one clock reading and
    one read of the random source: a batch append needs one per event."""
    stamp = (time.time_ns() // 1_000_000 & (1 << 48) - 1) << 80
    noise = _random_bytes(10 * count)
    ids = []
    for offset in range(0, 10 * count, 10):
        value = (stamp | int.from_bytes(noise[offset : offset + 10], "big")) & _VERSION_7_MASK
        # Built without UUID.__init__'s argument parsing: the value is a checked 128-bit int.
        made = _new(UUID)
        _set(made, "int", value | _VERSION_7_BITS)
        _set(made, "is_safe", _UNKNOWN_SAFETY)
        ids.append(made)
    return ids


@dataclass(frozen=True, order=True)
class Position:
    """An opaque, comparable place in the global log: (writer's xid, insert order)."""

    transaction_id: int
    global_position: int

    def __str__(self) -> str:
        return f"{self.transaction_id}:{self.global_position}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Read back the ``xid:position`` form produced by ``str(position)``, or
        InvalidArgument (a ValueError) naming the text."""
        xid, _, pos = text.partition(":") if isinstance(text, str) else ("", "", "")
        if not (xid.isascii() and xid.isdigit() and pos.isascii() and pos.isdigit()):
            raise InvalidArgument(f"position {text!r} is not of the form xid:position")
        return cls(int(xid), int(pos))


@dataclass(frozen=True)
class NewEvent:
    """An event to append; the store validates it and assigns a UUIDv7 id when none is given."""

    type: str
    data: Mapping[str, Any]
    event_id: UUID | str | None = None
    metadata: Mapping[str, Any] | None = None
    schema_version: int = 1


class ScannedEvent(NamedTuple):
    """What a bulk fold reads of a stored event (:meth:`EventStore.scan_streams`): its
    place in its stream, its type and version, and its data as the JSON text stored
    (decoded straight into its model by :meth:`EventRegistry.decode_scanned`)."""

    stream_id: str
    stream_version: int
    type: str
    schema_version: int
    data_json: str


@dataclass(frozen=True)
class RecordedEvent:
    """An event as stored: its place in its stream and in the global log, and its hashes."""

    stream_id: str
    stream_version: int
    event_id: UUID
    type: str
    schema_version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: datetime
    position: Position
    event_hash: str
    prev_hash: str
    tenant_id: str | None = None
    hash_version: int = 1
    """Which layout of :data:`events.eventstore.hashing.HASH_BODY_LAYOUTS` its hash covers."""


def metadata_tenant(metadata: Mapping[str, Any]) -> str | None:
    """The tenant an event's metadata names (``"tenant"``, a string), which its
    ``tenant_id`` column holds: the one rule both are derived by."""
    tenant = metadata.get("tenant")
    return tenant if type(tenant) is str else None


@dataclass(frozen=True)
class AppendResult:
    """What an append wrote (or, for an idempotent retry, what the first attempt wrote)."""

    stream_id: str
    version: int
    events: tuple[RecordedEvent, ...] = field(default_factory=tuple)
    duplicate: bool = False

    @property
    def first_version(self) -> int:
        """The stream version of the first appended event."""
        return self.events[0].stream_version

    @property
    def last_position(self) -> Position:
        """The global position of the last appended event."""
        return self.events[-1].position


def append_result(
    stream_id: str, version: int, events: tuple[RecordedEvent, ...]
) -> AppendResult:
    """A fresh append's result, built as :func:`events.eventstore.driver.recorded_event_row` builds
    its
    events: without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per
    field), since every append makes one. The same attributes and equality."""
    result = _new(AppendResult)
    result.__dict__.update(stream_id=stream_id, version=version, events=events, duplicate=False)
    return result
