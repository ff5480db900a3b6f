"""Gap-safe global reading: a late commit with a lower position is never skipped."""

from __future__ import annotations

import psycopg
import pytest
from log_reading import read_everything, read_until

from events import EventStore, GateVerdict, NewEvent, stream_version_gate

pytestmark = pytest.mark.integration


def test_a_held_append_is_invisible_then_read_from_the_checkpoint(store: EventStore) -> None:
    # given one committed event, read by a subscriber that checkpoints after it
    store.append("early", [NewEvent("E", {})])
    first = read_until(store, None, 1)
    checkpoint = first[-1].position

    with psycopg.connect(store.conninfo) as held:
        # when an append takes a position and stays uncommitted
        slow = store.append("slow", [NewEvent("Slow", {})], conn=held)
        # and later appends (with higher positions) commit meanwhile
        for n in range(3):
            store.append("fast", [NewEvent("Fast", {"n": n})])
        fast_positions = [e.position.global_position for e in store.read_stream("fast")]
        assert slow.events[0].position.global_position < min(fast_positions)

        # then a naive "position > last" reader would move past the held position...
        with store.connection() as conn:
            naive = [
                row[0]
                for row in conn.execute(
                    "SELECT global_position FROM eventstore.events"
                    " WHERE global_position > %s ORDER BY global_position",
                    (checkpoint.global_position,),
                )
            ]
        assert naive == fast_positions
        # ...while the gap-safe reader returns nothing beyond the held transaction's horizon
        assert read_everything(store, checkpoint) == []

        held.commit()

    # then after the commit, reading from the same checkpoint yields every event, none skipped
    after = read_until(store, checkpoint, 4)
    assert [e.stream_id for e in after] == ["slow", "fast", "fast", "fast"]
    assert [e.data.get("n") for e in after[1:]] == [0, 1, 2]
    assert [e.position for e in after] == sorted(e.position for e in after)


def test_an_xid_inversion_is_caught_by_the_stream_version_gate(store: EventStore) -> None:
    # given transaction A that took its xid early by appending to another stream
    with psycopg.connect(store.conninfo) as a:
        store.append("other", [NewEvent("O", {})], conn=a)
        # and B that appends version 1 of stream s and commits
        store.append("s", [NewEvent("V", {"v": 1})], expected_version=0)
        # when A then appends version 2 of s and commits
        store.append("s", [NewEvent("V", {"v": 2})], expected_version=1, conn=a)
        a.commit()

    # then the log (in xid order) delivers s@2 before s@1
    log = [(e.stream_id, e.stream_version) for e in read_until(store, None, 3)]
    assert log.index(("s", 2)) < log.index(("s", 1))

    # and a consumer gating on last + 1 sees the gap, fills it from the stream, skips the rest
    applied: list[int] = []
    for event in read_everything(store, None):
        if event.stream_id != "s":
            continue
        last = applied[-1] if applied else 0
        verdict = stream_version_gate(last, event)
        if verdict is GateVerdict.GAP:
            missing = store.read_stream(
                "s", after_version=last, to_version=event.stream_version - 1
            )
            applied.extend(e.stream_version for e in missing)
            verdict = stream_version_gate(applied[-1], event)
        if verdict is GateVerdict.APPLY:
            applied.append(event.stream_version)
    assert applied == [1, 2]


def test_read_all_walks_the_cursor_index_without_sorting(store: EventStore) -> None:
    # given a log (the planner is told sorting is off-limits, so only an index can order it)
    store.append("s", [NewEvent("E", {"n": n}) for n in range(50)])
    from events.eventstore.reading import _READ_ALL

    with store.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_sort = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        # when the gap-safe page query is planned
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + _READ_ALL, ("0", 0, 100)))
    # then it is an ordered walk of (transaction_id, global_position), not a scan-and-sort
    assert "events_transaction_position_idx" in plan and "Sort" not in plan


def test_the_horizon_stays_below_a_held_append_and_a_later_scan_sees_every_stream(
    store: EventStore,
) -> None:
    # given committed events in three streams of one prefix and one of another
    for name in ("s-a", "s-b", "s-c"):
        store.append(name, [NewEvent("E", {"n": n}) for n in range(3)])
    store.append("other", [NewEvent("E", {})])
    settled = read_until(store, None, 10)[-1].position

    with psycopg.connect(store.conninfo) as held:
        # when an append is held open and another commits after it
        store.append("s-a", [NewEvent("Late", {})], conn=held)
        store.append("s-d", [NewEvent("E", {})])
        # then the horizon is no later than the last event before the held transaction
        horizon = store.horizon()
        assert horizon is not None and horizon <= settled
        held.commit()

    # and a scan taken afterwards, split in two parts, holds each stream whole, in order
    parts = [list(store.scan_streams("s-", part=k, parts=2)) for k in range(2)]
    seen = {e.stream_id for e in parts[0]} | {e.stream_id for e in parts[1]}
    assert seen == {"s-a", "s-b", "s-c", "s-d"}
    assert not {e.stream_id for e in parts[0]} & {e.stream_id for e in parts[1]}
    for events in parts:
        keys = [(e.stream_id, e.stream_version) for e in events]
        assert keys == sorted(keys)
    assert [e.type for e in store.read_stream("s-a")] == [
        e.type for part in parts for e in part if e.stream_id == "s-a"
    ] == ["E", "E", "E", "Late"]
    with pytest.raises(ValueError, match="part must be in"):
        next(store.scan_streams("s-", part=2, parts=2))
