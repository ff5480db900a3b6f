"""Event store contract under both logs: idempotent event ids, conflicts, size limits."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from contract_support import Ports

from events import (
    ANY,
    DEFAULT_MAX_EVENT_BYTES,
    NO_STREAM,
    ConcurrencyError,
    EventIdConflict,
    InvalidEvent,
    NewEvent,
)


def _event(event_id: uuid.UUID | None = None, **data: object) -> NewEvent:
    return NewEvent("Noted", dict(data or {"n": 1}), event_id=event_id)


def test_a_retried_append_returns_the_first_result_even_when_stale(ports: Ports) -> None:
    ids = [uuid.uuid4(), uuid.uuid4()]
    first = ports.store.append("s", [_event(ids[0]), _event(ids[1], n=2)], NO_STREAM)
    ports.store.append("s", [_event()], 2)
    again = ports.store.append("s", [_event(ids[0]), _event(ids[1], n=2)], NO_STREAM)
    assert again.duplicate and not first.duplicate
    assert (again.version, again.events) == (first.version, first.events)
    also = ports.store.append("s", [_event(ids[0]), _event(ids[1], n=2)], ANY)
    assert also.duplicate and also.events == first.events
    assert ports.store.stream_version("s") == 3


def test_a_stored_id_with_other_content_is_a_conflict(ports: Ports) -> None:
    event_id = uuid.uuid4()
    ports.store.append("s", [_event(event_id)], NO_STREAM)
    with pytest.raises(EventIdConflict) as raised:
        ports.store.append("s", [_event(event_id, n=99)], 1)
    assert raised.value.event_id == event_id
    with pytest.raises(EventIdConflict):
        ports.store.append("other", [_event(event_id)], NO_STREAM)  # same id, other stream


def test_a_batch_mixing_stored_and_new_ids_is_a_conflict(ports: Ports) -> None:
    stored = uuid.uuid4()
    ports.store.append("s", [_event(stored)], NO_STREAM)
    with pytest.raises(EventIdConflict):
        ports.store.append("s", [_event(stored), _event(uuid.uuid4())], ANY)
    assert ports.store.stream_version("s") == 1


def test_events_without_ids_are_never_deduplicated(ports: Ports) -> None:
    ports.store.append("s", [_event()], NO_STREAM)
    with pytest.raises(ConcurrencyError):
        ports.store.append("s", [_event()], NO_STREAM)
    assert ports.store.append("s", [_event()], ANY).version == 2


def test_an_id_twice_in_one_batch_is_refused(ports: Ports) -> None:
    event_id = uuid.uuid4()
    with pytest.raises(InvalidEvent, match="twice"):
        ports.store.append("s", [_event(event_id), _event(event_id)], NO_STREAM)


def test_the_size_limit_counts_serialized_bytes(ports: Ports) -> None:
    # {"n":"…"} is 8 bytes around the text and metadata "{}" is 2 more.
    fits = "x" * (DEFAULT_MAX_EVENT_BYTES - 10)
    assert ports.store.append("s", [_event(n=fits)], NO_STREAM).version == 1
    with pytest.raises(InvalidEvent, match="limit"):
        ports.store.append("s", [_event(n=fits + "y")], 1)


def test_a_retry_inside_a_unit_sees_the_units_own_append(ports: Ports) -> None:
    event_id = uuid.uuid4()
    with ports.log.unit_of_work() as unit:
        first = unit.append("s", [_event(event_id)], NO_STREAM)  # type: ignore[attr-defined]
        again = unit.append("s", [_event(event_id)], NO_STREAM)  # type: ignore[attr-defined]
    assert again.duplicate and again.events == first.events
    assert ports.store.read_stream("s") == list(first.events)


def test_of_racing_creators_exactly_one_wins(ports: Ports) -> None:
    outcomes: list[str] = []

    def create(n: int) -> None:
        try:
            ports.store.append("race", [_event(n=n)], NO_STREAM)
            outcomes.append("won")
        except ConcurrencyError:
            outcomes.append("lost")

    threads = [threading.Thread(target=create, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
    assert ports.store.stream_version("race") == 1


def test_the_global_log_never_shows_a_later_event_before_an_open_units(ports: Ports) -> None:
    # PostgreSQL's horizon is server-wide (other databases' transactions hold it back too),
    # so the log is read until it shows all three; what matters is what it never shows.
    ports.store.append("a", [_event()], NO_STREAM)
    with ports.log.unit_of_work() as unit:
        unit.append("b", [_event()], NO_STREAM)  # type: ignore[attr-defined]
        ports.store.append("c", [_event()], NO_STREAM)  # commits first, sorts after b
        assert {e.stream_id for e in ports.store.read_all()} <= {"a"}
    for _ in range(500):
        streams = [e.stream_id for e in ports.store.read_all()]
        assert streams in (["a", "b", "c"], ["a", "b"], ["a"], [])
        if len(streams) == 3:
            break
        time.sleep(0.02)
    assert streams == ["a", "b", "c"]


def test_a_stream_reads_back_by_version_range_with_its_head(ports: Ports) -> None:
    appended = ports.store.append("s", [_event(n=n) for n in range(1, 6)], NO_STREAM)
    assert [e.data["n"] for e in ports.store.read_stream("s", after_version=1, to_version=3)] == [
        2, 3]
    assert ports.store.read_stream("s") == list(appended.events)
    assert ports.store.stream_head("s") == (5, appended.events[-1].event_hash)
    assert ports.store.stream_head("nothing") is None
    assert ports.store.read_stream("nothing") == []
    assert ports.store.read_streams(["s", "nothing"])["nothing"] == []
