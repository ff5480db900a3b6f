"""saga_core.agents.plans: what the mutation run of ``plans.py`` found no test for (issue 36).

A plan is parsed from an untrusted document at the edges of each field, and what was
parsed (then hashed and recorded) cannot be changed afterwards.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from saga_core.agents.plans import action_step_id, parse_plan, plan_input_fields, validate_plan
from saga_core.definitions.inputs import validate_input
from saga_core.errors import PlanRejected
from saga_core.keys import payload_hash
from sagafleet.example_sagas import trip_tool_catalogue


def test_a_one_character_tool_name_parses_and_an_empty_one_is_refused_by_name() -> None:
    plan = parse_plan({"actions": [{"tool": "x"}]})
    assert [a.tool for a in plan.actions] == ["x"]  # unknown tools are refused later, by name
    with pytest.raises(PlanRejected) as refused:
        parse_plan({"actions": [{"tool": ""}]})
    assert "tool" in str(refused.value)


def test_version_one_is_the_default_and_the_least_a_plan_may_ask() -> None:
    assert parse_plan({"actions": [{"tool": "x"}]}).actions[0].version == 1
    assert parse_plan({"actions": [{"tool": "x", "version": 1}]}).actions[0].version == 1
    with pytest.raises(PlanRejected) as refused:
        parse_plan({"actions": [{"tool": "x", "version": 0}]})
    assert "version" in str(refused.value)


def test_a_parsed_plan_cannot_be_changed() -> None:
    plan = parse_plan({"goal": "g", "actions": [{"tool": "x", "args": {"n": 1}}]})
    with pytest.raises(ValidationError):
        plan.actions[0].tool = "refund"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        plan.goal = "other"  # type: ignore[misc]


@pytest.mark.parametrize(("tool", "slug"), [
    ("email.send", "email_send"), ("9lives", "t_9lives"), ("!!!", "action"),
    ("_x", "x"), ("x2", "x2")])
def test_an_action_without_an_id_is_named_by_its_tool_and_twelve_hex_of_its_call(
        tool: str, slug: str) -> None:
    action = parse_plan({"actions": [{"tool": tool, "args": {"n": 1}}]}).actions[0]
    step_id = action_step_id(action)
    digest = payload_hash({"tool": tool, "version": 1, "args": {"n": 1}})
    assert step_id == f"{slug}_{digest[:12]}"


def test_a_plans_definition_is_version_one_unless_named_otherwise() -> None:
    # found by the mutation run (issue 36): plans.py:239 survived every test
    hold = {"tool": "flights.hold", "args": {"flight_id": "LH1", "passenger_email": "a@b"}}
    plan = parse_plan({"actions": [hold]})
    assert validate_plan(plan, trip_tool_catalogue()).version == 1
    assert validate_plan(plan, trip_tool_catalogue(), version=3).version == 3


def test_a_boolean_sent_to_an_integer_argument_is_refused_by_name() -> None:
    # found by the mutation run (issue 36): plans.py:111 survived every test (True is an int)
    hold = {"tool": "hotels.hold",
            "args": {"hotel_id": "H1", "nights": True, "guest_email": "a@b"}}
    with pytest.raises(PlanRejected) as refused:
        validate_plan(parse_plan({"actions": [hold]}), trip_tool_catalogue())
    assert "nights must be integer" in str(refused.value)


def test_an_allowlist_admits_the_tools_it_names_and_refuses_the_others_by_name() -> None:
    # found by the mutation run (issue 36): plans.py:128 survived every test
    hold = {"tool": "flights.hold", "args": {"flight_id": "LH1", "passenger_email": "a@b"}}
    plan = parse_plan({"actions": [hold]})
    assert validate_plan(plan, trip_tool_catalogue(), allowlist={("flights.hold", 1)})
    with pytest.raises(PlanRejected) as refused:
        validate_plan(plan, trip_tool_catalogue(), allowlist={("hotels.hold", 1)})
    assert "not_allowlisted" in str(refused.value)


def _hotel_hold(**args: object) -> dict[str, object]:
    return {"tool": "hotels.hold",
            "args": {"hotel_id": "H1", "nights": 2, "guest_email": "a@b", **args}}


@pytest.mark.parametrize("order", ["whole first", "embedded first"])
def test_an_input_is_typed_by_the_first_argument_that_takes_it_whole(order: str) -> None:
    # found by the mutation run (issue 36): plans.py:170-174 survived every test, and the
    # field's type hung on the order of the arguments (an input first seen inside a string
    # was typed a string, and a start giving an integer for the nights was then refused)
    args = {"nights": "${input.nights}", "hotel_id": "H-${input.nights}"}
    if order == "embedded first":
        args = dict(reversed(list(args.items())))
    plan = parse_plan({"actions": [_hotel_hold(**args)]})
    fields = plan_input_fields(plan, trip_tool_catalogue())
    assert fields["nights"].type == "integer"
    assert validate_plan(plan, trip_tool_catalogue()).input["nights"].type == "integer"


def test_an_input_no_argument_takes_whole_is_a_string() -> None:
    # inside a longer text, even of an integer argument, or in an argument the tool does not
    # declare, the field is text; the first argument that takes it whole types it
    plan = parse_plan({"actions": [
        _hotel_hold(nights="1${input.extra}", hotel_id="${input.code}", note="${input.note}"),
        {"tool": "email.send_itinerary", "args": {"nights": "${input.code}"}}]})
    fields = plan_input_fields(plan, trip_tool_catalogue())
    assert {name: f.type for name, f in fields.items()} == {
        "extra": "string", "code": "string", "note": "string"}


def test_only_input_references_become_input_fields() -> None:
    # a step's receipt or the saga's id is no field of the start's input
    plan = parse_plan({"actions": [
        {"id": "flight", "tool": "flights.hold",
         "args": {"flight_id": "LH1", "passenger_email": "${input.email}"}},
        _hotel_hold(hotel_id="${steps.flight.receipt.resource_id}", guest_email="${saga.id}")]})
    assert set(plan_input_fields(plan, trip_tool_catalogue())) == {"email"}


def test_an_input_whose_fields_a_plan_reads_is_an_object() -> None:
    # found beside the mutation run (issue 36): ${input.stay.nights} typed `stay` a string,
    # so a start giving the stay as an object was refused and no start could resolve it
    hold = _hotel_hold(hotel_id="${input.stay.hotel}", nights="${input.stay.nights}")
    definition = validate_plan(parse_plan({"actions": [hold]}), trip_tool_catalogue())
    assert definition.input["stay"].type == "object"
    assert validate_input(definition, {"stay": {"hotel": "H1", "nights": 2}}) == {
        "stay": {"hotel": "H1", "nights": 2}}
    # a whole reference still types the field, wherever a deeper one appears
    whole_first = parse_plan({"actions": [_hotel_hold(hotel_id="${input.code}"),
                                          _hotel_hold(hotel_id="${input.code.x}")]})
    assert plan_input_fields(whole_first, trip_tool_catalogue())["code"].type == "string"
