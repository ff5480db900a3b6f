"""Auditing a stream's hash chain: recompute every hash and name the first bad event.

Each event is checked with the hash layout of its own version (events.eventstore.hashing), and its
``tenant_id`` column against the tenant its metadata names: a layout-1 hash does not cover
the column, and the column is what tenant-scoped reads (``find --trace``) filter on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from events.eventstore.hashing import HASH_BODY_LAYOUTS, recorded_event_hash
from events.eventstore.model import GENESIS_HASH, RecordedEvent, metadata_tenant


class StreamSource(Protocol):
    """What a chain is verified from: a store's streams and their heads (either store)."""

    def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        """A stream's events in version order."""

    def stream_head(self, stream_id: str) -> tuple[int, str] | None:
        """The stream head's (version, last event hash), None for an unknown stream."""


@dataclass(frozen=True)
class ChainBreak:
    """The first event whose stored content, version or predecessor link does not verify."""

    stream_version: int
    event_id: str
    reason: str


@dataclass(frozen=True)
class ChainReport:
    """The outcome of verifying one stream's chain."""

    stream_id: str
    events_checked: int
    head_hash: str
    first_break: ChainBreak | None = None

    @property
    def ok(self) -> bool:
        """True when every event verified."""
        return self.first_break is None


def verify_chain(source: StreamSource | Sequence[RecordedEvent], stream_id: str) -> ChainReport:
    """Verify ``stream_id``'s chain from a store (read now) or from already-read events."""
    if isinstance(source, Sequence):
        events = sorted(
            (e for e in source if e.stream_id == stream_id), key=lambda e: e.stream_version
        )
    else:
        events = source.read_stream(stream_id)
    report = _verify(stream_id, events)
    if isinstance(source, Sequence):
        return report
    return with_head(report, source.stream_head(stream_id))


def with_head(report: ChainReport, head: tuple[int, str] | None) -> ChainReport:
    """``report`` with the stream's head row (version, last hash; None: no row) checked
    against the events: the head is what appends continue from and expect versions of."""
    if not report.ok or head is None or head == (report.events_checked, report.head_hash):
        return report
    return ChainReport(
        report.stream_id,
        report.events_checked,
        report.head_hash,
        ChainBreak(
            head[0],
            "?",
            f"stream head says version {head[0]} hash {head[1][:12]}…, "
            f"the events end at {report.events_checked} hash {report.head_hash[:12]}…",
        ),
    )


def event_problem(event: RecordedEvent, expected_version: int, previous: str) -> str | None:
    """Why one event does not verify as the ``expected_version`` of its stream following an
    event whose hash is ``previous``; None when it does."""
    if event.stream_version != expected_version:
        return f"version {event.stream_version} where {expected_version} was expected"
    if event.prev_hash != previous:
        return "prev_hash does not match the preceding event's hash"
    if event.hash_version not in HASH_BODY_LAYOUTS:
        return f"hash version {event.hash_version} is not one this code knows (edited?)"
    if event.tenant_id != metadata_tenant(event.metadata):
        # Values left out: a reader of one tenant must not learn another tenant's name.
        return ("its tenant_id column does not match the tenant its metadata names"
                " (edited after it was recorded)")
    if recorded_event_hash(event) != event.event_hash:
        covered = "content, tenant or recording time" if event.hash_version > 1 else "content"
        return f"its {covered} does not match its hash (edited after it was recorded)"
    return None


def content_verifies(event: RecordedEvent) -> bool:
    """Whether one event, on its own, matches its stored hash and its tenant column its
    metadata (its link to its predecessor is the chain's check): what a read that crosses
    streams (a trace) asks before it shows an event to a tenant."""
    return (event.hash_version in HASH_BODY_LAYOUTS
            and event.tenant_id == metadata_tenant(event.metadata)
            and recorded_event_hash(event) == event.event_hash)


def _verify(stream_id: str, events: list[RecordedEvent]) -> ChainReport:
    previous = GENESIS_HASH
    for expected_version, event in enumerate(events, start=1):
        reason = event_problem(event, expected_version, previous)
        if reason is not None:
            found = ChainBreak(event.stream_version, str(event.event_id), reason)
            return ChainReport(stream_id, expected_version, previous, found)
        previous = event.event_hash
    return ChainReport(stream_id, len(events), previous)
