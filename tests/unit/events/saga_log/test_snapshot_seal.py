"""A snapshot's seal: its event's hash and its stored state's (no database; the stores'
own sealing is exercised on both by tests/contract/test_contract_snapshots.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from datetime import UTC, datetime

from events.eventstore.model import Position, RecordedEvent
from events.saga_log.snapshots import StoredSnapshot, snapshot_problem, text_hash


def test_the_text_hash_is_what_postgresql_computes_of_its_jsonb_text() -> None:
    # sha256(convert_to(state::text, 'UTF8')) in the save statement: UTF-8 bytes, hex
    text = '{"a": "é", "b": [1, 2.5]}'
    assert text_hash(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def _event(version: int, digest: str) -> RecordedEvent:
    return RecordedEvent("saga-s", version, uuid.uuid4(), "T", 1, {}, {},
                         datetime(2026, 1, 1, tzinfo=UTC), Position(1, version), digest, "0")


def test_a_seal_holds_only_for_its_event_and_an_intact_state() -> None:
    # given a snapshot taken at the event whose hash is e…
    snapshot = StoredSnapshot("saga-s", 3, "d", {"nodes": [], "state": {}}, "e" * 64)
    # then it holds against that event, and against no other, nor with its state edited
    assert snapshot_problem(snapshot, _event(3, "e" * 64)) is None
    assert "no event at version 3" in (snapshot_problem(snapshot, None) or "")
    assert "another event" in (snapshot_problem(snapshot, _event(3, "f" * 64)) or "")
    edited = dataclasses.replace(snapshot, state_intact=False)
    assert "does not match its hash" in (snapshot_problem(edited, _event(3, "e" * 64)) or "")
