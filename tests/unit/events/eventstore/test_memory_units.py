"""What only the in-memory store has to say: a unit that loses its stream at commit, a
unit used after it ended, and many threads appending at once."""

from __future__ import annotations

import threading

import pytest

from events import ANY, NO_STREAM, ConcurrencyError, InvalidArgument, NewEvent
from events.eventstore.memory import MemoryEventStore
from events.integrity.chain import verify_chain


def _event(n: int = 1) -> NewEvent:
    return NewEvent("Noted", {"n": n})


def test_a_unit_whose_stream_moved_before_its_commit_applies_nothing() -> None:
    store = MemoryEventStore()
    with pytest.raises(ConcurrencyError) as raised, store.transaction() as unit:
        unit.append("s", [_event()], NO_STREAM)
        unit.append("t", [_event()], NO_STREAM)
        store.append("s", [_event(2)], NO_STREAM)  # another writer commits first
    assert (raised.value.stream_id, raised.value.actual) == ("s", 1)
    assert store.stream_version("t") == 0
    assert [e.data for e in store.read_stream("s")] == [{"n": 2}]


def test_a_unit_that_ended_takes_no_more_writes() -> None:
    store = MemoryEventStore()
    with store.transaction() as unit:
        unit.append("s", [_event()], NO_STREAM)
    with pytest.raises(InvalidArgument):
        unit.append("s", [_event()], ANY)
    assert store.stream_version("s") == 1


def test_threads_appending_at_once_keep_every_chain_whole() -> None:
    store = MemoryEventStore()

    def write(stream: str) -> None:
        for n in range(50):
            store.append(stream, [_event(n)], ANY)

    threads = [threading.Thread(target=write, args=(f"s{i % 3}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(3):
        assert store.stream_version(f"s{i}") == 100
        assert verify_chain(store, f"s{i}").ok
    positions = [e.position for e in store.read_all(limit=1000)]
    assert len(positions) == 300 and positions == sorted(positions)
