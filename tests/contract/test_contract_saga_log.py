"""SagaLog contract: load, load many, append at a version, tenants, corrupt streams."""

from __future__ import annotations

import pytest
from contract_support import Ports, finished, note, registered, start, started

from events import ANY, NO_STREAM, ConcurrencyError, InvalidArgument, InvalidEvent, NewEvent
from events.eventstore.hashing import recorded_event_hash
from events.integrity.chain import verify_chain
from events.saga_log.streams import CorruptSagaStream, SagaNotFound, saga_stream
from saga_core.contracts import SagaStatus
from saga_core.engine.events import SagaFinished, SagaStarted


def test_a_saga_that_was_never_started_is_not_found(ports: Ports) -> None:
    with pytest.raises(SagaNotFound):
        ports.log.load("nobody")


def test_an_appended_saga_loads_back_folded_at_its_version(ports: Ports) -> None:
    appended = start(ports, "s1")
    assert (appended.version, appended.duplicate) == (1, False)
    loaded = ports.log.load_history("s1")
    assert (loaded.saga_id, loaded.version, loaded.tenant) == ("s1", 1, "t")
    assert loaded.definition == registered(ports)
    assert isinstance(loaded.events[0], SagaStarted)
    assert loaded.started == loaded.events[0]
    assert loaded.records == appended.events
    assert loaded.records[0].metadata == {"tenant": "t"}
    assert loaded.records[0].tenant_id == "t"


def test_the_actor_travels_in_the_metadata(ports: Ports) -> None:
    definition = registered(ports)
    ports.log.append("s1", "t", [started("s1", definition)], NO_STREAM, actor="agent-7")
    assert ports.log.load_history("s1").records[0].metadata == {"tenant": "t", "actor": "agent-7"}


def test_another_tenants_saga_is_not_found(ports: Ports) -> None:
    start(ports, "s1", tenant="acme")
    assert ports.log.load("s1", tenant="acme").tenant == "acme"
    with pytest.raises(SagaNotFound):
        ports.log.load("s1", tenant="globex")


def test_an_append_at_a_stale_version_names_the_actual_one(ports: Ports) -> None:
    start(ports, "s1")
    ports.log.append("s1", "t", [finished(1)], 1)
    with pytest.raises(ConcurrencyError) as raised:
        ports.log.append("s1", "t", [finished(2)], 1)
    assert (raised.value.stream_id, raised.value.expected, raised.value.actual) == (
        saga_stream("s1"), 1, 2)
    with pytest.raises(ConcurrencyError) as again:
        start(ports, "s1")
    assert (again.value.expected, again.value.actual) == (NO_STREAM, 2)
    with pytest.raises(ConcurrencyError) as ahead:
        ports.log.append("s2", "t", [finished(1)], 3)
    assert ahead.value.actual == 0
    assert ports.log.load("s1").version == 2  # the refused appends wrote nothing


def test_any_appends_whatever_the_version(ports: Ports) -> None:
    start(ports, "s1")
    appended = ports.log.append("s1", "t", [note(1), note(2)], ANY)
    assert (appended.first_version, appended.version) == (2, 3)


def test_appended_events_have_rising_positions_and_a_verifiable_chain(ports: Ports) -> None:
    first = start(ports, "s1")
    second = ports.log.append("s1", "t", [note(1), note(2)], 1)
    other = start(ports, "s2")
    records = [*first.events, *second.events, *other.events]
    positions = [r.position for r in records]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    for record in records:
        assert recorded_event_hash(record) == record.event_hash
    assert verify_chain(ports.log.load_history("s1").records, saga_stream("s1")).ok
    assert verify_chain(ports.store, saga_stream("s1")).ok
    assert second.events[0].prev_hash == first.events[0].event_hash


def test_a_load_at_a_position_sees_the_saga_as_it_was_then(ports: Ports) -> None:
    first = start(ports, "s1")
    ports.log.append("s1", "t", [finished(1)], 1)
    then = ports.log.load("s1", at=first.last_position)
    assert then.version == 1 and then.state.status == SagaStatus.RUNNING
    assert ports.log.load("s1").state.status == SagaStatus.COMPENSATED


def test_load_many_maps_each_id_to_its_saga_or_its_error(ports: Ports) -> None:
    start(ports, "s1")
    start(ports, "s2")
    ports.log.append("bad", "t", [finished(1)], NO_STREAM)
    loaded = ports.log.load_many(["s1", "missing", "s2", "bad", "s1"])
    assert set(loaded) == {"s1", "s2", "missing", "bad"}
    assert loaded["s1"].version == 1 and loaded["s2"].saga_id == "s2"  # type: ignore[union-attr]
    assert type(loaded["missing"]) is SagaNotFound
    assert type(loaded["bad"]) is CorruptSagaStream


def test_a_stream_not_starting_with_saga_started_is_corrupt(ports: Ports) -> None:
    ports.log.append("s1", "t", [finished(1)], NO_STREAM)
    with pytest.raises(CorruptSagaStream):
        ports.log.load("s1")


def test_an_undecodable_event_makes_the_stream_corrupt(ports: Ports) -> None:
    start(ports, "s1")
    ports.store.append(saga_stream("s1"), [NewEvent("NoSuchEvent", {"x": 1})], 1)
    with pytest.raises(CorruptSagaStream):
        ports.log.load("s1")


def test_a_loaded_record_is_the_readers_own(ports: Ports) -> None:
    start(ports, "s1")
    ports.log.load_history("s1").records[0].data["tenant"] = "mallory"
    assert ports.log.load_history("s1").records[0].data["tenant"] == "t"


def test_bad_arguments_are_refused_alike(ports: Ports) -> None:
    registered(ports)
    with pytest.raises(InvalidEvent):
        ports.log.append("s1", "t", [], NO_STREAM)
    with pytest.raises(InvalidEvent):
        ports.log.append("s1", "t", [finished(1)], "one")  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent):
        ports.log.append("x" * 300, "t", [finished(1)], NO_STREAM)
    with pytest.raises(InvalidArgument):
        ports.log.load("x" * 300)
    with pytest.raises(InvalidArgument):
        ports.log.load_many(["ok", "x" * 300])
    with pytest.raises(InvalidArgument):
        ports.log.append("s1", "t", [finished(1)], NO_STREAM, unit=object())


def test_an_event_too_large_is_refused_before_any_write(ports: Ports) -> None:
    definition = registered(ports)
    huge = started("s1", definition).model_copy(update={"input": {"blob": "x" * 1_100_000}})
    with pytest.raises(InvalidEvent, match="limit"):
        ports.log.append("s1", "t", [huge], NO_STREAM)
    with pytest.raises(SagaNotFound):
        ports.log.load("s1")


def test_the_finished_event_folds_into_a_terminal_state(ports: Ports) -> None:
    start(ports, "s1")
    ports.log.append("s1", "t", [finished(1)], 1)
    loaded = ports.log.load_history("s1")
    assert isinstance(loaded.events[-1], SagaFinished)
    assert loaded.state.status.is_terminal
