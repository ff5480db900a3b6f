"""Lineage on the test kit: a start records who and what asked; every event of the saga
carries its trace id, and the trace finds them (issue 19 part 1)."""

from __future__ import annotations

import pytest
from trip_inputs import TRIP_INPUT

from events.saga_log.memory import MemorySagaLog
from events.saga_log.streams import saga_stream
from saga_core.agents.lineage import InvalidLineage, Lineage
from saga_core.engine.events import SagaStarted
from sagafleet.testing import TestFleet

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
ASKED = {"agent_request_id": "req-77", "model_name": "claude-sonnet",
         "model_version": "2026-10-01", "prompt_version": "trip-policy@12", "trace_id": TRACE}


def test_a_start_records_its_lineage_and_every_event_carries_the_trace() -> None:
    fleet = TestFleet()
    client = fleet.client(tenant="t1")
    saga = client.start("trip", TRIP_INPUT, key="k", lineage=ASKED)
    fleet.run_until_idle()
    events = fleet.events(saga.saga_id)
    started = events[0]
    assert isinstance(started, SagaStarted)
    assert started.lineage == Lineage(**ASKED)
    records = fleet.log.store.read_stream(saga_stream(saga.saga_id))
    assert len(records) == len(events) > 8
    assert {r.metadata["saga_trace_id"] for r in records} == {TRACE}
    # From the trace to every event, and only this tenant's.
    found = fleet.trace(TRACE, tenant="t1")
    assert [r.event_id for r in found] == [r.event_id for r in records]
    assert fleet.trace(TRACE, tenant="t2") == []


def test_a_start_given_no_trace_gets_one_and_two_sagas_of_one_trace_are_both_found() -> None:
    fleet = TestFleet()
    client = fleet.client()
    first = client.start("trip", TRIP_INPUT, key="a", lineage={"agent_request_id": "r1"})
    started = fleet.events(first.saga_id)[0]
    assert isinstance(started, SagaStarted) and started.lineage is not None
    trace = started.lineage.trace_id
    assert trace is not None and len(trace) == 32
    assert started.lineage.agent_request_id == "r1"
    second = client.start("trip", TRIP_INPUT, key="b", lineage={"trace_id": trace})
    fleet.run_until_idle()
    sagas = {r.stream_id for r in fleet.trace(trace)}
    assert sagas == {saga_stream(first.saga_id), saga_stream(second.saga_id)}


def test_a_repeated_key_keeps_the_first_lineage() -> None:
    fleet = TestFleet()
    client = fleet.client()
    first = client.start("trip", TRIP_INPUT, key="k", lineage=ASKED)
    again = client.start("trip", TRIP_INPUT, key="k", lineage={"agent_request_id": "other"})
    assert again.saga_id == first.saga_id and not again.created
    started = fleet.events(first.saga_id)[0]
    assert isinstance(started, SagaStarted)
    assert started.lineage is not None and started.lineage.agent_request_id == "req-77"


@pytest.mark.parametrize(("lineage", "named"), [
    ({"trace_id": "XYZ"}, "trace_id must be 32 lowercase hex"),
    ({"trace_id": "0" * 32}, "not all zero"),
    ({"model_name": "m" * 201}, "lineage_chars"),
    ({"model_name": "  "}, "model_name must not be blank"),
    ({"model_version": 3}, "model_version must be a string"),
    ({"prompt": "v1"}, "unknown field 'prompt'"),
    ({"agent_request_id": "a\nb"}, "control characters"),
    ("req-1", "lineage must be an object"),
])
def test_a_malformed_lineage_is_refused_by_name_and_starts_nothing(
    lineage: object, named: str
) -> None:
    fleet = TestFleet()
    with pytest.raises(InvalidLineage, match=named):
        fleet.client().start("trip", TRIP_INPUT, key="k", lineage=lineage)  # type: ignore[arg-type]
    assert not any(r.stream_id.startswith("saga-") for r in fleet.log.store.read_all())


def test_a_saga_started_before_lineage_existed_folds_unchanged() -> None:
    """An old SagaStarted (no lineage key) is stored and folds as it did; a start without
    lineage still serialises without the key only when none is recorded."""
    fleet = TestFleet()
    saga = fleet.client().start("trip", TRIP_INPUT, key="k")
    fleet.run_until_idle()
    log: MemorySagaLog = fleet.log
    records = log.store.read_stream(saga_stream(saga.saga_id))
    data = dict(records[0].data)
    old = {k: v for k, v in data.items() if k != "lineage"}
    decoded = SagaStarted.model_validate(old)
    assert decoded.lineage is None
    assert "lineage" not in decoded.model_dump(mode="json")
    assert decoded.model_dump(mode="json") == old
    # Folding the old event gives the state a new one gives, lineage aside.
    folded_old = log.codec.fold(saga.saga_id, [_with_data(records[0], old), *records[1:]])
    folded_new = log.codec.fold(saga.saga_id, records)
    assert folded_old.state == folded_new.state


def _with_data(record, data):  # type: ignore[no-untyped-def]
    copy = object.__new__(type(record))
    copy.__dict__.update(record.__dict__, data=data)
    return copy
