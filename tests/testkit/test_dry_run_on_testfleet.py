"""A dry run on the test kit: it shows what a start will do, and the real start then does
exactly that (same operation keys, same resolved requests), while the dry run itself wrote
nothing and called no tool."""

from __future__ import annotations

from decimal import Decimal

import pytest
from trip_inputs import TRIP_INPUT

from saga_core.contracts import StepKind
from saga_core.engine.events import StepStarted
from saga_core.errors import InputValidationError
from sagafleet.testing import TestFleet, TripTools

BIG_TRIP = {**TRIP_INPUT, "amount": 250_000}  # above 1000.00: the capture needs approval
ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}


def _everything(fleet: TestFleet) -> tuple[int, int, int, int]:
    """Events in the kit's log, definitions, step messages published, and effects the
    tools committed."""
    assert isinstance(fleet.tools, TripTools)
    return (len(fleet.log.store.read_all(limit=100_000)),
            len(fleet.definitions.list(tenant="t")), len(fleet.publisher),
            len(fleet.tools.effects))


def test_a_dry_run_writes_nothing_and_calls_nothing_then_the_start_does_what_it_showed():
    # given the test kit with its trip
    fleet = TestFleet()
    client = fleet.client(tenant="t", actor="agent")
    before = _everything(fleet)
    # when the trip is dry-run with a key
    planned = client.dry_run("trip", BIG_TRIP, key="dry-1")
    # then nothing was recorded and no tool was called
    assert _everything(fleet) == before
    assert client.find("dry-1") is None
    # and the graph is the trip's: flight and hotel first, then capture, then the email
    assert planned.order == [["hold_flight", "hold_hotel"], ["capture_payment"],
                             ["send_itinerary"]]
    assert planned.saga_id_final
    # and the card token is masked, never shown
    assert "tok_visa_4242" not in planned.model_dump_json()
    capture = next(s for s in planned.steps if s.step_id == "capture_payment")
    assert capture.forward.gate is not None and capture.forward.gate.will_ask is True
    assert capture.forward.gate.role == "approver" and capture.forward.gate.four_eyes
    assert any("capture_payment" in line for line in planned.gates)
    assert capture.compensation is not None and capture.compensation.tool == "payments.refund"
    # when the real start runs with the same key
    saga = client.start("trip", BIG_TRIP, key="dry-1")
    fleet.run_until_idle()
    fleet.person("finance", tenant="t").approve(saga.saga_id, "capture_payment")
    fleet.run_until_idle()
    # then it ran on the saga id and the operation keys the dry run showed, with the
    # requests it showed (same resolved arguments, same hash)
    assert saga.saga_id == planned.saga_id
    started = {e.step_id: e for e in fleet.events(saga.saga_id)
               if isinstance(e, StepStarted) and e.kind is StepKind.FORWARD}
    assert set(started) == {s.step_id for s in planned.steps}
    for step in planned.steps:
        assert started[step.step_id].operation_key == step.forward.operation_key
        if step.forward.request_hash is not None:
            assert started[step.step_id].request_hash == step.forward.request_hash
    assert client.status(saga.saga_id).status == "COMPLETED"


def test_arguments_that_wait_for_a_receipt_are_shown_with_what_they_wait_for():
    planned = TestFleet().client().dry_run("trip", TRIP_INPUT)
    assert not planned.saga_id_final  # no key: an example saga id
    for step in planned.steps:
        if step.compensation is not None:
            assert step.step_id in step.compensation.waits_for
            assert step.compensation.request_hash is None
    flight = next(s for s in planned.steps if s.step_id == "hold_flight")
    assert flight.forward.args is not None and flight.forward.args["flight_id"] == "FL123"


def test_a_secret_card_token_is_masked_in_the_resolved_arguments():
    planned = TestFleet().client().dry_run("trip", TRIP_INPUT, key="k")
    capture = next(s for s in planned.steps if s.step_id == "capture_payment")
    assert capture.forward.args is not None
    assert "tok_visa_4242" not in str(capture.forward.args)
    # the token is shown as the placeholder the log records for it, as a worker resolves it
    assert "card_token" in str(capture.forward.args)


def test_a_dry_run_refuses_bad_input_with_the_same_typed_problems_as_a_start():
    client = TestFleet().client()
    bad = {**TRIP_INPUT, "nights": "two"}
    with pytest.raises(InputValidationError) as dry:
        client.dry_run("trip", bad)
    with pytest.raises(InputValidationError) as real:
        client.start("trip", bad)
    assert dry.value.problems == real.value.problems


def test_a_plan_is_dry_run_without_being_registered():
    fleet = TestFleet()
    client = fleet.client()
    planned = client.dry_run_plan(ROOM_PLAN, {})
    assert planned.definition.startswith("agent-plan-")
    assert [s.step_id for s in planned.steps] == [planned.order[0][0]]
    assert planned.steps[0].compensation is not None  # the catalogue's release
    assert not [r for r in fleet.definitions.list(tenant="default")
                if r.name == planned.definition]


def test_a_plan_s_dry_run_shows_the_budget_the_catalogue_gives_agent_plans():
    # given the kit's catalogue, whose hotels.hold costs 2 and hotels.release 1 per call
    planned = TestFleet().client().dry_run_plan(ROOM_PLAN, {})
    # then the estimate charges each step once, and compares it with the plan budget
    assert planned.budget is not None
    assert (planned.budget.forward_cost, planned.budget.compensation_cost) == ("2.0", "1.0")
    assert planned.budget.max_cost == 200.0 and planned.budget.within_budget is True
    # and the trip's estimate is its tools' declared costs, each step once
    fleet = TestFleet()
    trip = fleet.definitions.get("trip", tenant="default")
    costs = [trip.tool_spec(s.id, StepKind.FORWARD) for s in trip.steps]
    expected = sum(Decimal(str(spec.cost)) for spec in costs if spec is not None)
    estimate = fleet.client().dry_run("trip", TRIP_INPUT).budget
    assert estimate is not None and trip.budget is not None
    assert Decimal(estimate.forward_cost) == expected
    assert estimate.max_cost == trip.budget.max_cost
