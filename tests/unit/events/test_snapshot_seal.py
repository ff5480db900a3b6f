"""A snapshot's seal: its event's hash and its state's (no database; the jsonb round trip
itself is exercised on PostgreSQL by tests/contract/test_contract_snapshots.py)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

from events.model import Position, RecordedEvent
from events.snapshots import sealed_snapshot, snapshot_problem, state_hash


def test_the_state_hash_reads_numbers_as_jsonb_gives_them_back() -> None:
    # jsonb prints 1e16 as 10000000000000000, which loads back as an int (events.hashing)
    assert state_hash({"b": 1e16, "c": 0.5}) == state_hash({"c": 0.5, "b": 10000000000000000})
    assert state_hash({"a": 1}) != state_hash({"a": 2})


def _event(version: int, digest: str) -> RecordedEvent:
    return RecordedEvent("saga-s", version, uuid.uuid4(), "T", 1, {}, {},
                         datetime(2026, 1, 1, tzinfo=UTC), Position(1, version), digest, "0")


def test_a_seal_holds_only_for_its_event_and_its_state() -> None:
    # given a snapshot sealed at the event whose hash is e…
    sealed = sealed_snapshot("saga-s", 3, "d", {"nodes": [], "state": {"x": 1}}, "e" * 64)
    # then it holds against that event, and against no other and no edit of its state
    assert snapshot_problem(sealed, _event(3, "e" * 64)) is None
    assert "no event at version 3" in (snapshot_problem(sealed, None) or "")
    assert "another event" in (snapshot_problem(sealed, _event(3, "f" * 64)) or "")
    edited = dataclasses.replace(sealed, state={"nodes": [], "state": {"x": 2}})
    assert "does not match its hash" in (snapshot_problem(edited, _event(3, "e" * 64)) or "")
