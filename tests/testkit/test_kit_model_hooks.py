"""The test kit's hooks for tests that interleave their own moves (the model-based test of
tests/unit/model uses them): one message at a time, the queue looked at, every call kept,
a fault on whichever tool comes next, a worker dying before its call, an answer too late."""

from __future__ import annotations

import pytest
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import StepOutcomeUnknown, StepSucceeded
from saga_core.engine.state import RunStatus
from sagafleet.testing import ANY_TOOL, Fault, TestFleet, ToolCall, TripTools, UnknownFault

F = StepKind.FORWARD


def _trip() -> tuple[TestFleet, TripTools, str]:
    fleet = TestFleet()
    assert isinstance(fleet.tools, TripTools)
    return fleet, fleet.tools, fleet.client().start("trip", TRIP_INPUT, key="hooks").saga_id


def test_run_next_handles_one_queued_message_and_peek_leaves_the_queue_as_it_is() -> None:
    fleet, _, saga_id = _trip()
    queued = fleet.publisher.peek()
    assert [c.step_id for c in queued] == ["hold_flight"]  # its sibling is claimed with it
    assert fleet.publisher.peek() == queued and len(fleet.publisher) == 1  # peek takes nothing
    fleet.publisher.publish(queued)  # a duplicate delivery
    assert fleet.run_next() is True
    assert fleet.publisher.peek() == queued  # the oldest was taken, the duplicate is next
    fleet.run_until_idle()
    assert fleet.run_next() is False  # nothing queued
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED


def test_calls_keep_every_execute_and_lookup_with_its_key_time_and_outcome() -> None:
    fleet, tools, saga_id = _trip()
    tools.fail_next("payments.capture", Fault.COMMIT_THEN_TIMEOUT)
    fleet.run_until_idle()
    capture = [c for c in tools.calls if c.tool == "payments.capture"]
    started = fleet.state(saga_id).run("capture_payment", F)
    assert [(c.op, c.outcome) for c in capture] == [("execute", "ambiguous"), ("lookup", "found")]
    assert {c.key for c in capture} == {started.operation_key}
    assert all(c.saga_id == saga_id and c.at == fleet.clock() for c in capture)
    assert isinstance(capture[0], ToolCall)
    assert sorted(c.tool for c in tools.calls if c.op == "execute") == [
        "email.send_itinerary", "flights.hold", "hotels.hold", "payments.capture"]


def test_a_refused_call_and_a_replayed_key_are_told_apart_from_a_commit() -> None:
    fleet, tools, _ = _trip()
    tools.fail_next("flights.hold", Fault.FAIL_BEFORE_COMMIT)
    fleet.run_until_idle()
    fleet.advance(60)
    flight = [c.outcome for c in tools.calls if c.tool == "flights.hold"]
    assert flight == ["refused", "committed"]


def test_a_fault_on_any_tool_fires_on_whichever_tool_is_called_next() -> None:
    fleet, tools, _ = _trip()
    tools.fail_next(ANY_TOOL, Fault.FAIL_BEFORE_COMMIT)
    fleet.run_until_idle()
    first = tools.calls[0]
    assert tools.fired == [(first.tool, Fault.FAIL_BEFORE_COMMIT, first.saga_id)]
    fleet.advance(60)
    assert [c.outcome for c in tools.calls[1:]] == ["committed"] * 4  # it fired once


def test_a_fault_on_an_unknown_tool_is_still_refused_by_name() -> None:
    _, tools, _ = _trip()
    with pytest.raises(UnknownFault, match="no in-memory tool 'nope'"):
        tools.fail_next("nope", Fault.FAIL_BEFORE_COMMIT)


def test_a_worker_dying_before_its_call_leaves_the_claim_to_its_lease_and_commits_nothing() -> None:
    fleet, tools, saga_id = _trip()
    tools.fail_next("hotels.hold", Fault.WORKER_CRASH_BEFORE_CALL)
    fleet.run_until_idle()
    assert len(fleet.crashed) == 1  # the message whose worker died
    assert fleet.state(saga_id).run("hold_hotel", F).status is RunStatus.STARTED
    assert tools.effects_of("hotels.hold") == []
    assert [c.outcome for c in tools.calls if c.tool == "hotels.hold"] == ["crashed"]
    fleet.advance(120)  # the lease runs out; the lookup finds nothing; it retries, same key
    unknown = [e for e in fleet.events(saga_id) if isinstance(e, StepOutcomeUnknown)]
    # The flight, claimed with it in one append, died with it, uncalled.
    assert sorted((u.step_id, u.reason) for u in unknown) == [
        ("hold_flight", "lease_expired"), ("hold_hotel", "lease_expired")]
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert len(tools.effects_of("hotels.hold", saga_id)) == 1


def test_a_slow_answer_moves_the_clock_past_the_lease_and_its_receipt_is_still_recorded() -> None:
    fleet, tools, saga_id = _trip()
    tools.fail_next("flights.hold", Fault.SLOW_ANSWER, delay_s=45)
    before = fleet.clock()
    fleet.run_until_idle()
    assert (fleet.clock() - before).total_seconds() == 45  # lease 30 s, horizon 30 s
    succeeded = [e for e in fleet.events(saga_id)
                 if isinstance(e, StepSucceeded) and e.step_id == "hold_flight"]
    assert len(succeeded) == 1 and succeeded[0].at == before + (fleet.clock() - before)
    assert len(tools.effects_of("flights.hold", saga_id)) == 1


def test_advance_copes_with_a_slow_answer_that_moves_the_clock_past_its_end() -> None:
    fleet, tools, saga_id = _trip()
    tools.fail_next("flights.hold", Fault.SLOW_ANSWER, delay_s=45)
    before = fleet.clock()
    fleet.advance(10)  # the call alone takes 45 s: the clock stays where the answer left it
    assert (fleet.clock() - before).total_seconds() == 45
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
