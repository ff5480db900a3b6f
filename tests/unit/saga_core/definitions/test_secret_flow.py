"""Secrets are tainted values: a secret input goes whole into secret arguments, and nowhere
else (saga_core.definitions.secret_flow), for hand-written definitions, agent plans and replans
alike."""

from __future__ import annotations

from typing import Any

import pytest
from core_harness import Saga

from saga_core import (
    AgentPlan,
    PlannedAction,
    PlanRejected,
    SagaDefinition,
    revise_plan,
    validate_plan,
)
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.validation import validate_definition
from saga_core.errors import DefinitionError
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue

CARD = "${input.card_token}"
CAPTURE = {"amount": 100, "currency": "EUR", "card_token": CARD}


def _rules(error: PlanRejected | DefinitionError) -> set[tuple[str, str]]:
    return {(p.where, p.rule) for p in error.problems}


def _trip(**step_args: dict[str, Any]) -> dict[str, Any]:
    """The trip definition as data, with the named steps' args replaced."""
    data = trip_definition().model_dump(mode="json")
    data.pop("tools", None)
    for step in data["steps"]:
        if step["id"] in step_args:
            step["args"] = step_args[step["id"]]
    return data


def _register(data: dict[str, Any], catalogue: ToolCatalogue | None = None) -> SagaDefinition:
    return validate_definition(SagaDefinition.model_validate(data),
                               catalogue or trip_tool_catalogue())


# -- agent plans: the reported bug ------------------------------------------------------------

@pytest.mark.parametrize("flight_first", [True, False])
def test_a_plan_sending_the_card_token_to_a_flight_id_is_refused_whichever_comes_first(
    flight_first: bool,
) -> None:
    # given a plan that uses ${input.card_token} as a flight id and as the capture's token
    flight = PlannedAction(tool="flights.hold", id="fl",
                           args={"flight_id": CARD, "passenger_email": "a@example.com"})
    capture = PlannedAction(tool="payments.capture", id="pay", args=CAPTURE)
    actions = [flight, capture] if flight_first else [capture, flight]
    # when it is validated
    with pytest.raises(PlanRejected) as refused:
        validate_plan(AgentPlan(actions=actions), trip_tool_catalogue())
    # then it is refused, naming the step that would send the secret to the airline
    assert _rules(refused.value) == {("step fl", "secret_flows_to_public")}
    assert "${input.card_token} is secret" in str(refused.value)


def test_a_plan_field_is_secret_when_any_argument_taking_it_whole_is_secret() -> None:
    # given a plan whose first use of the field is an ordinary text, refused as such
    plan = AgentPlan(actions=[
        PlannedAction(tool="hotels.hold", id="ht",
                      args={"hotel_id": "H1", "nights": 1, "guest_email": f"x{CARD}"}),
        PlannedAction(tool="payments.capture", id="pay", args=CAPTURE)])
    with pytest.raises(PlanRejected) as refused:
        validate_plan(plan, trip_tool_catalogue())
    assert _rules(refused.value) == {("step ht", "secret_flows_to_public")}
    # and the plan that uses it only in the capture gets a secret field
    fine = validate_plan(AgentPlan(actions=[PlannedAction(tool="payments.capture",
                                                          args=CAPTURE)]),
                         trip_tool_catalogue())
    assert fine.input["card_token"].secret


def test_a_plan_giving_a_secret_argument_a_receipt_or_a_deeper_path_is_refused() -> None:
    plan = AgentPlan(actions=[
        PlannedAction(tool="flights.hold", id="fl",
                      args={"flight_id": "LH1", "passenger_email": "a@example.com"}),
        PlannedAction(tool="payments.capture", id="pay",
                      args={**CAPTURE, "card_token": "${steps.fl.receipt.resource_id}"})])
    with pytest.raises(PlanRejected) as refused:
        validate_plan(plan, trip_tool_catalogue())
    assert _rules(refused.value) == {("step pay", "secret_argument_not_secret")}
    deeper = AgentPlan(actions=[PlannedAction(
        tool="payments.capture", args={**CAPTURE, "card_token": "${input.card.token}"})])
    with pytest.raises(PlanRejected, match="secret_argument_not_secret"):
        validate_plan(deeper, trip_tool_catalogue())


# -- replans go through the same rule ---------------------------------------------------------

def test_a_replan_that_sends_the_running_sagas_secret_elsewhere_is_refused() -> None:
    # given a running plan saga whose card token is a secret input
    capture = PlannedAction(tool="payments.capture", id="pay", args=CAPTURE)
    saga = Saga(validate_plan(AgentPlan(actions=[capture]), trip_tool_catalogue()),
                {"card_token": {"$secret": "card_token"}})
    saga.settle()
    # when the agent revises it to also hold a flight with the token as its id
    leaking = AgentPlan(actions=[
        capture, PlannedAction(tool="flights.hold", id="fl",
                               args={"flight_id": CARD, "passenger_email": "a@example.com"})])
    # then the revision is refused, naming the step
    with pytest.raises(PlanRejected) as refused:
        revise_plan(saga.state, leaking, trip_tool_catalogue(), saga.now)
    assert ("step fl", "secret_flows_to_public") in _rules(refused.value)


# -- hand-written definitions -----------------------------------------------------------------

def test_the_trip_keeps_its_secret_and_registers() -> None:
    assert _register(_trip()).input["card_token"].secret


@pytest.mark.parametrize(("step", "args", "where"), [
    # an ordinary argument of another tool
    ("hold_flight", {"flight_id": CARD, "passenger_email": "${input.customer_email}"},
     "step hold_flight"),
    # part of a text, even in the step whose tool takes the token
    ("capture_payment", {"amount": "${input.amount}", "currency": "${input.currency}",
                         "card_token": CARD, "reference": f"card {CARD}"},
     "step capture_payment"),
])
def test_a_definition_sending_a_secret_input_to_a_public_argument_is_refused(
    step: str, args: dict[str, Any], where: str,
) -> None:
    with pytest.raises(DefinitionError) as refused:
        _register(_trip(**{step: args}))
    assert _rules(refused.value) == {(where, "secret_flows_to_public")}
    assert "tok_" not in str(refused.value)


def test_a_secret_input_in_a_precondition_or_a_compensation_argument_is_refused() -> None:
    data = _trip()
    flight = data["steps"][0]
    flight["precondition"] = {"card": CARD}
    flight["compensation"]["args"] = {"hold_id": CARD}
    with pytest.raises(DefinitionError) as refused:
        _register(data)
    assert _rules(refused.value) == {("step hold_flight precondition", "secret_flows_to_public"),
                                     ("step hold_flight compensation", "secret_flows_to_public")}


def test_a_compensation_may_hand_the_secret_to_an_argument_its_tool_marks_secret() -> None:
    # given a catalogue whose refund takes the card token as a secret argument
    data = trip_tool_catalogue().model_dump(mode="json")
    refund = next(t for t in data["tools"] if t["name"] == "payments.refund")
    refund["args"]["card_token"] = {"type": "string", "secret": True}
    catalogue = ToolCatalogue.model_validate(data)
    trip = _trip()
    capture = next(s for s in trip["steps"] if s["id"] == "capture_payment")
    capture["compensation"]["args"]["card_token"] = CARD
    # then the definition registers
    assert _register(trip, catalogue).step("capture_payment").compensation is not None


@pytest.mark.parametrize(("given", "rule"), [
    ("${input.flight_id}", "secret_argument_not_secret"),  # a public field: in the log
    ("tok_visa_4242", "secret_literal"),  # stored in the definition itself
    ("${steps.hold_flight.receipt.resource_id}", "secret_argument_not_secret"),
])
def test_a_secret_argument_given_anything_but_a_secret_input_field_is_refused(
    given: str, rule: str,
) -> None:
    args = {"amount": "${input.amount}", "currency": "${input.currency}", "card_token": given}
    with pytest.raises(DefinitionError) as refused:
        _register(_trip(capture_payment=args))
    assert ("step capture_payment", rule) in _rules(refused.value)
    assert "tok_visa_4242" not in str(refused.value)


def test_a_tool_without_an_argument_schema_cannot_take_a_secret() -> None:
    # given a tool that declares no arguments (so none of them is secret)
    data = trip_tool_catalogue().model_dump(mode="json")
    for tool in data["tools"]:
        if tool["name"] == "flights.hold":
            tool["args"] = {}
    catalogue = ToolCatalogue.model_validate(data)
    trip = _trip(hold_flight={"anything": CARD})
    with pytest.raises(DefinitionError) as refused:
        _register(trip, catalogue)
    assert _rules(refused.value) == {("step hold_flight", "secret_flows_to_public")}
