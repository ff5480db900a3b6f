"""Exported function-calling schemas are valid JSON Schema and reject what an LLM gets wrong."""

from __future__ import annotations

import anyio
import pytest
from jsonschema import Draft202012Validator

from saga_core.definitions.inputs import validate_input
from saga_core.errors import InputValidationError
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from sagafleet.gateway import (
    GatewayService,
    NoCaller,
    build_mcp_server,
    definition_function,
    export,
    gateway_functions,
)
from workers.fleet import Fleet, FleetConfig

GOOD_INPUT = {
    "customer_email": "ada@example.com", "flight_id": "FL1", "hotel_id": "HT1", "nights": 2,
    "amount": 42_000, "currency": "EUR", "card_token": "tok_1234",
}


@pytest.fixture
def specs():
    """The functions of a server over a fleet that never connects (only schemas are read)."""
    fleet = Fleet(FleetConfig(database_url="postgresql://unused", broker_url="redis://unused"),
                  trip_tool_catalogue())
    server = build_mcp_server(GatewayService(fleet), NoCaller())
    return gateway_functions([trip_definition()], anyio.run(server.list_tools))


def test_every_exported_schema_is_valid_json_schema_in_both_formats(specs):
    # when the functions are exported in both styles
    openai = export(specs, "openai")
    anthropic = export(specs, "anthropic")
    # then every parameter schema is valid JSON Schema
    for tool in openai:
        assert tool["type"] == "function"
        Draft202012Validator.check_schema(tool["function"]["parameters"])
    for tool in anthropic:
        Draft202012Validator.check_schema(tool["input_schema"])
    # and both hold the same functions, with the typed start function and no approval
    names = [t["name"] for t in anthropic]
    assert names == [t["function"]["name"] for t in openai]
    assert "start_trip" in names and "start_saga" in names
    assert not any("approve" in n for n in names)
    assert all(len(n) <= 64 and n.replace("_", "").isalnum() for n in names)


def test_secret_fields_are_described_in_words_not_vendor_keywords():
    # when the trip definition is exported
    params = definition_function(trip_definition()).parameters
    card = params["properties"]["input"]["properties"]["card_token"]
    # then no non-standard keyword remains, and the model is told the field is secret
    assert "x-secret" not in card and "writeOnly" not in card
    assert "secret" in card["description"]
    assert "$schema" not in params["properties"]["input"]


@pytest.mark.parametrize(("mistake", "field"), [
    ({"nights": "two"}, "nights"),          # a number as words
    ({"amount": "420.00 EUR"}, "amount"),   # a formatted amount
    ({"card_token": None}, "card_token"),   # a null where a string is needed
])
def test_a_mistyped_field_is_rejected_with_its_field(mistake, field):
    # given an LLM's call with one mistyped field
    arguments = {"input": GOOD_INPUT | mistake, "idempotency_key": "k", "reason": "why"}
    validator = Draft202012Validator(definition_function(trip_definition()).parameters)
    # when it is validated against the exported schema
    errors = list(validator.iter_errors(arguments))
    # then the error names the field
    assert [list(e.absolute_path) for e in errors] == [["input", field]]
    # and the gateway's own validation names the same field with its rule
    with pytest.raises(InputValidationError) as caught:
        validate_input(trip_definition(), arguments["input"])
    assert [(p.where, p.rule) for p in caught.value.problems] == [(f"input.{field}", "wrong_type")]


def test_a_missing_field_is_rejected_with_its_name():
    # given an LLM's call that forgot the card token and the reason
    partial = {k: v for k, v in GOOD_INPUT.items() if k != "card_token"}
    arguments = {"input": partial, "idempotency_key": "k"}
    validator = Draft202012Validator(definition_function(trip_definition()).parameters)
    # when validated, then both omissions are reported where they are
    messages = sorted((list(e.path), e.validator) for e in validator.iter_errors(arguments))
    assert messages == [([], "required"), (["input"], "required")]
    assert any("card_token" in e.message for e in validator.iter_errors(arguments))
    # and the gateway's validation names the field and the rule
    with pytest.raises(InputValidationError) as caught:
        validate_input(trip_definition(), partial)
    assert [(p.where, p.rule) for p in caught.value.problems] == [("input.card_token", "missing")]
    # and a valid call passes
    assert not list(validator.iter_errors(
        {"input": GOOD_INPUT, "idempotency_key": "k", "reason": "why"}))
