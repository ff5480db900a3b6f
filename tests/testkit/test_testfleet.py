"""TestFleet as a user meets it: the trip, approvals over time, lost messages, own tools."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from trip_inputs import TRIP_INPUT

from saga_core import SagaDefinition, ToolCatalogue
from saga_core.contracts import Receipt, SagaStatus
from saga_core.engine.events import ApprovalRequested, BudgetExceeded, SagaStarted, StepSucceeded
from sagafleet.example_sagas import trip_definition
from sagafleet.testing import (
    FleetMisconfigured,
    InMemoryTools,
    TestClock,
    TestFleet,
    TripTools,
    UnknownFault,
)
from sagafleet.testing.clock import EPOCH
from workers.tools import Absent, LookupResult, ToolRegistry, ToolSet, ToolSetMismatch

BIG_TRIP = {**TRIP_INPUT, "amount": 250_000}  # above 1000.00: the capture needs approval



def test_the_trip_completes_and_its_events_are_recorded() -> None:
    fleet = TestFleet()
    client = fleet.client(tenant="t", actor="agent")
    saga = client.start("trip", TRIP_INPUT, key="k1")
    fleet.run_until_idle()
    assert client.status(saga.saga_id).status == "COMPLETED"
    events = fleet.events(saga.saga_id)
    assert isinstance(events[0], SagaStarted)
    assert "tok_visa_4242" not in repr(events)  # the secret card token never enters the log
    assert {e.step_id for e in events if isinstance(e, StepSucceeded)} == {
        "hold_flight", "hold_hotel", "capture_payment", "send_itinerary"}
    assert isinstance(fleet.tools, TripTools)
    assert fleet.tools.ledger(saga.saga_id).is_complete_trip


def test_two_runs_of_one_scenario_record_the_same_events() -> None:
    def run() -> list[tuple[str, str]]:
        fleet = TestFleet()
        assert isinstance(fleet.tools, TripTools)
        fleet.tools.fail_next("hotels.hold", "commit_then_timeout")
        fleet.tools.fail_next("payments.capture", "fail_before_commit")
        saga_id = fleet.client().start("trip", TRIP_INPUT, key="same").saga_id
        fleet.run_until_idle()
        fleet.advance(120)
        return [(type(e).__name__, e.at.isoformat()) for e in fleet.events(saga_id)]

    assert run() == run()


def test_a_business_rejection_of_the_capture_unwinds_the_holds() -> None:
    fleet = TestFleet()
    tools = fleet.tools
    assert isinstance(tools, TripTools)
    tools.fail_next("payments.capture", "business_rejection")
    saga_id = fleet.client().start("trip", TRIP_INPUT).saga_id
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    assert tools.ledger(saga_id).is_unwound and tools.ledger(saga_id).captures == 0


def test_an_approval_granted_in_time_lets_the_capture_run() -> None:
    fleet = TestFleet()
    client = fleet.client()
    saga_id = client.start("trip", BIG_TRIP).saga_id
    fleet.run_until_idle()
    assert client.status(saga_id).pending_approvals
    fleet.advance(600)  # ten minutes pass; the request lives an hour
    fleet.person("finance").approve(saga_id, "capture_payment")
    fleet.run_until_idle()
    assert client.status(saga_id).status == "COMPLETED"


def test_an_approval_request_that_expires_is_asked_again_when_the_clock_passes_it() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", BIG_TRIP).saga_id
    fleet.run_until_idle()
    fleet.advance(3600)  # the request's lifetime
    asked = [e for e in fleet.events(saga_id) if isinstance(e, ApprovalRequested)]
    assert len(asked) == 2
    assert asked[1].at == asked[0].at + timedelta(seconds=3600)  # at the expiry, not later


def test_lost_messages_are_found_by_the_sweeper_when_time_passes() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", TRIP_INPUT).saga_id
    lost = fleet.publisher.drop_pending()  # a broker restart loses the wake-up
    assert lost
    assert fleet.run_until_idle() == 0
    assert fleet.state(saga_id).status is SagaStatus.RUNNING
    fleet.advance(1)
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED


def test_the_fleet_runs_on_the_clock_it_is_given() -> None:
    clock = TestClock()
    fleet = TestFleet(tools=TripTools(clock), definitions=None)
    assert fleet.clock is clock
    fleet.advance(90)
    assert clock.now() == EPOCH + timedelta(seconds=90)
    with pytest.raises(FleetMisconfigured, match="not both"):
        TestFleet(tools=TripTools(clock), clock=TestClock())


# -- a user's own tools ---------------------------------------------------------------------

NOTES = ToolCatalogue.model_validate({"tools": [
    {"name": "notes.write", "version": 1, "semantics": "compensable", "dedupes_by_key": True,
     "commit_horizon_s": 5, "receipt_fields": ["text"], "args": {"text": {"type": "string"}},
     "compensation": {"tool": "notes.erase", "version": 1,
                      "args": {"note_id": "${receipt.resource_id}"}}},
    {"name": "notes.erase", "version": 1, "semantics": "idempotent_by_key",
     "dedupes_by_key": True, "commit_horizon_s": 5, "args": {"note_id": {"type": "string"}}},
]})
NOTE = SagaDefinition.model_validate({
    "name": "note", "version": 1,
    "input": {"text": {"type": "string", "min_length": 1}},
    "steps": [{"id": "write", "tool": "notes.write", "version": 1, "semantics": "compensable",
               "args": {"text": "${input.text}"},
               "retry": {"max_attempts": 3, "base_delay_s": 0.1, "max_delay_s": 1.0},
               "compensation": {"tool": "notes.erase", "version": 1,
                                "args": {"note_id": "${receipt.resource_id}"}}}],
})


def _notes_tools() -> tuple[InMemoryTools, dict[str, str]]:
    notes: dict[str, str] = {}

    def write(args: Mapping[str, Any], key: str) -> Receipt:
        notes[key] = args["text"]
        return Receipt(resource_id=key, status="written", fields={"text": args["text"]})

    def erase(args: Mapping[str, Any], key: str) -> Receipt:
        notes.pop(args["note_id"], None)
        return Receipt(resource_id=args["note_id"], status="erased")

    tools = InMemoryTools(NOTES)
    tools.add("notes.write", write)
    tools.add("notes.erase", erase)
    return tools, notes


def test_a_users_own_definition_and_in_memory_tools_run_with_faults() -> None:
    tools, notes = _notes_tools()
    fleet = TestFleet(definitions=[NOTE], tools=tools)
    tools.fail_next("notes.write", "commit_then_timeout")
    saga_id = fleet.client().start("note", {"text": "hello"}).saga_id
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert list(notes.values()) == ["hello"]  # found by lookup, not written twice
    assert len(tools.effects_of("notes.write", saga_id)) == 1 and not tools.duplicate_effects()


def test_a_users_own_tool_set_of_plain_tools_runs_too() -> None:
    class Notes:
        """A tool as a user may write one: only execute and lookup."""

        def __init__(self, name: str) -> None:
            self.name, self.version = name, 1
            self.seen: dict[str, Receipt] = {}

        def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
            return self.seen.setdefault(key, Receipt(resource_id=key, fields={"text": "x"}))

        def lookup(self, key: str) -> LookupResult:
            return self.seen.get(key) or Absent("no such note")

    registry = ToolRegistry({("notes.write", 1): Notes("notes.write"),
                             ("notes.erase", 1): Notes("notes.erase")})
    fleet = TestFleet(definitions=[NOTE], tools=ToolSet(NOTES, registry))
    saga_id = fleet.client().start("note", {"text": "hi"}).saga_id
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED


def test_a_tool_set_missing_a_catalogue_tool_is_refused_by_name() -> None:
    tools = InMemoryTools(NOTES)
    tools.add("notes.write", lambda args, key: Receipt(resource_id=key))
    with pytest.raises(ToolSetMismatch, match="notes.erase@1"):
        TestFleet(definitions=[NOTE], tools=tools)
    with pytest.raises(UnknownFault):
        tools.fail_next("notes.erase", "fail_before_commit")


def test_the_fleet_needs_no_server_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("TestFleet tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    fleet = TestFleet()
    assert isinstance(fleet.tools, TripTools)
    fleet.tools.fail_next("hotels.hold", "worker_crash_after_commit")
    saga_id = fleet.client().start("trip", TRIP_INPUT).saga_id
    fleet.run_until_idle()
    fleet.advance(60)
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED


def test_a_time_limit_passing_while_an_approval_waits_compensates_at_the_limit() -> None:
    # given a trip version with a 30-minute limit whose capture waits for an approval
    fleet = TestFleet()
    client = fleet.client()
    tight = trip_definition().model_dump(mode="json")
    tight.update(name="tight_trip", version=1, budget={"time_limit_s": 1800})
    fleet.person("admin", roles=("admin",)).register_definition(tight)
    saga_id = client.start("tight_trip", BIG_TRIP).saga_id
    fleet.run_until_idle()
    assert client.status(saga_id).pending_approvals
    # when an hour passes with no answer
    fleet.advance(3600)
    # then the limit was acted on when it passed (not at the request's expiry), and the
    # holds were released
    started = fleet.events(saga_id)[0].at
    [breach] = [e for e in fleet.events(saga_id) if isinstance(e, BudgetExceeded)]
    assert breach.at == started + timedelta(seconds=1800)
    assert fleet.state(saga_id).status is SagaStatus.COMPENSATED
    tools = fleet.tools
    assert isinstance(tools, TripTools)
    assert tools.ledger(saga_id).is_unwound and tools.ledger(saga_id).captures == 0
