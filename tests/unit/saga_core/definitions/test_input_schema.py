"""Saga inputs are checked as JSON Schema (Draft 2020-12, the jsonschema library): nested
objects, arrays, format and pattern, each problem naming the value's path and the rule; a
definition whose input cannot be checked as declared is refused at registration."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import pytest

from saga_core import InputValidationError, validate_input
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.definition import SagaDefinition, parse_definition
from saga_core.definitions.input_schema import FORMATS
from saga_core.definitions.validation import validate_definition
from saga_core.errors import DefinitionError, Problem
from saga_core.limits import LimitExceeded
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from tests.trip_inputs import TRIP_INPUT

TRAVELLER: dict[str, Any] = {
    "type": "object",
    "description": "Who travels.",
    "properties": {
        "name": {"type": "string", "min_length": 1},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date", "required": False},
        "loyalty": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{6}$", "required": False},
        "address": {"type": "object", "required": False, "properties": {
            "city": {"type": "string"},
            "country": {"type": "string", "enum": ["FR", "DE", "JP"]},
        }},
    },
}
PASSENGERS: dict[str, Any] = {
    "type": "array", "min_length": 1, "max_length": 3,
    "items": {"type": "object", "properties": {
        "email": {"type": "string", "format": "email"},
        "seat": {"type": "integer", "minimum": 1},
    }},
}
EXTRA_FIELDS: dict[str, Any] = {
    "traveller": TRAVELLER,
    "passengers": PASSENGERS,
    "departs_at": {"type": "string", "format": "date-time", "required": False},
    "terms_url": {"type": "string", "format": "uri", "required": False},
    "booking_ref": {"type": "string", "pattern": "^BK-[0-9]{4}$", "required": False},
}
GOOD: dict[str, Any] = {
    **TRIP_INPUT,
    "traveller": {"name": "Ada", "email": "ada@example.com", "born": "1815-12-10",
                  "loyalty": "AB123456", "address": {"city": "Paris", "country": "FR"}},
    "passengers": [{"email": "ada@example.com", "seat": 1},
                   {"email": "bob@example.com", "seat": 2}],
    "departs_at": "2026-12-24T08:30:00Z",
    "terms_url": "https://example.com/terms",
    "booking_ref": "BK-0042",
}


def _document(**fields: Any) -> dict[str, Any]:
    """The trip's definition document with ``fields`` added to its input."""
    document = trip_definition().model_dump(mode="json")
    document.pop("tools")
    document["version"] = 99
    document["input"] = {**document["input"], **fields}
    return document


def _registered(**fields: Any) -> SagaDefinition:
    return validate_definition(parse_definition(_document(**fields)), trip_tool_catalogue())


def _problems(data: dict[str, Any]) -> set[tuple[str, str]]:
    with pytest.raises(InputValidationError) as caught:
        validate_input(_registered(**EXTRA_FIELDS), data)
    return {(p.where, p.rule) for p in caught.value.problems}


def test_a_well_formed_nested_input_is_accepted_as_given() -> None:
    assert validate_input(_registered(**EXTRA_FIELDS), GOOD) == GOOD


def test_nested_objects_are_checked_member_by_member() -> None:
    traveller = {"email": "ada@example.com", "nickname": "countess",
                 "address": {"city": 7, "country": "XX"}}
    assert _problems({**GOOD, "traveller": traveller}) == {
        ("input.traveller.name", "missing"),
        ("input.traveller.nickname", "unknown_field"),
        ("input.traveller.address.city", "wrong_type"),
        ("input.traveller.address.country", "not_in_enum"),
    }


def test_arrays_are_checked_item_by_item_and_by_count() -> None:
    passengers = [{"email": "ada@example.com", "seat": 0}, {"email": "not-an-email", "seat": 2}]
    assert _problems({**GOOD, "passengers": passengers}) == {
        ("input.passengers[0].seat", "out_of_range"),
        ("input.passengers[1].email", "invalid_format"),
    }
    assert _problems({**GOOD, "passengers": []}) == {("input.passengers", "too_short")}
    four = [{"email": "a@example.com", "seat": n} for n in range(1, 5)]
    assert _problems({**GOOD, "passengers": four}) == {("input.passengers", "too_long")}


@pytest.mark.parametrize(("field", "bad"), [
    ("departs_at", "2026-13-24T08:30:00Z"),  # no thirteenth month
    ("departs_at", "tomorrow morning"),
    ("terms_url", "example.com/terms"),  # a URI needs a scheme
    ("terms_url", "https://exa mple.com"),
])
def test_formats_are_checked_not_merely_annotated(field: str, bad: str) -> None:
    assert _problems({**GOOD, field: bad}) == {(f"input.{field}", "invalid_format")}


@pytest.mark.parametrize("email", ["ada", "ada@", "@example.com", "a@b@example.com",
                                   "ada @example.com", "ada@example"])
def test_an_email_format_needs_a_local_part_and_a_domain(email: str) -> None:
    problems = _problems({**GOOD, "traveller": {**GOOD["traveller"], "email": email}})
    assert problems == {("input.traveller.email", "invalid_format")}


def test_a_pattern_is_searched_and_its_message_never_repeats_the_value() -> None:
    with pytest.raises(InputValidationError) as caught:
        validate_input(_registered(**EXTRA_FIELDS), {**GOOD, "booking_ref": "BK-42-secretish"})
    [problem] = caught.value.problems
    assert (problem.where, problem.rule) == ("input.booking_ref", "pattern_mismatch")
    assert "^BK-[0-9]{4}$" in problem.message and "secretish" not in problem.message


def test_a_secret_field_value_never_appears_in_a_problem() -> None:
    with pytest.raises(InputValidationError) as caught:
        validate_input(trip_definition(), {**TRIP_INPUT, "card_token": ""})
    assert caught.value.problems == [
        Problem("input.card_token", "too_short", "length must be >= 1")]


def test_an_integer_field_takes_integers_only() -> None:
    # JSON Schema would count 1.0 as an integer; a saga's integers stay ints, bools are refused
    for nights in (2.0, True, "2"):
        with pytest.raises(InputValidationError) as caught:
            validate_input(trip_definition(), {**TRIP_INPUT, "nights": nights})
        assert [(p.where, p.rule) for p in caught.value.problems] == [
            ("input.nights", "wrong_type")]


def test_the_agent_facing_schema_shows_the_nested_fields() -> None:
    schema = _registered(**EXTRA_FIELDS).input_json_schema()
    traveller = schema["properties"]["traveller"]
    assert traveller["required"] == ["name", "email"]
    assert traveller["additionalProperties"] is False
    assert traveller["properties"]["email"] == {"type": "string", "format": "email"}
    assert schema["properties"]["passengers"]["minItems"] == 1
    assert schema["properties"]["passengers"]["items"]["properties"]["seat"]["minimum"] == 1


def test_a_nested_definition_round_trips_with_a_stable_hash() -> None:
    definition = _registered(**EXTRA_FIELDS)
    again = SagaDefinition.from_yaml(definition.to_yaml())
    assert again.content_hash() == definition.content_hash()
    assert again.input["traveller"].properties is not None


def test_fields_without_the_new_keywords_dump_as_before() -> None:
    # a registered definition's hash is its identity: nothing new may appear in its dump
    for field in trip_definition().model_dump(mode="json")["input"].values():
        assert not {"pattern", "format", "properties", "items",
                    "additional_properties"} & set(field)


@pytest.mark.parametrize(("field", "rule"), [
    ({"type": "string", "pattern": "(unclosed"}, "invalid_pattern"),
    ({"type": "string", "format": "postcode"}, "unknown_format"),
    ({"type": "integer", "pattern": "^1$"}, "misplaced_keyword"),
    ({"type": "string", "items": {"type": "string"}}, "misplaced_keyword"),
    ({"type": "array", "properties": {"a": {"type": "string"}}}, "misplaced_keyword"),
    ({"type": "object", "properties": {"pin": {"type": "string", "secret": True}}},
     "nested_secret"),
    ({"type": "string", "pattern": "^(a+)+$"}, "backtracking_pattern"),
    ({"type": "string", "pattern": r"^(\w+\s?)*$"}, "backtracking_pattern"),
    ({"type": "array", "items": {"type": "string", "pattern": "(x|y+)*z"}},
     "backtracking_pattern"),
])
def test_an_input_that_cannot_be_checked_as_declared_is_refused_at_registration(
    field: dict[str, Any], rule: str,
) -> None:
    with pytest.raises(DefinitionError) as caught:
        _registered(odd=field)
    assert any(p.rule == rule and p.where.startswith("input.odd")
               for p in caught.value.problems), caught.value.problems


def test_patterns_that_repeat_a_fixed_unit_are_fine() -> None:
    _registered(code={"type": "string", "pattern": r"^([A-Z]{3}-)*[0-9]+$"},
                word={"type": "string", "pattern": r"^[a-z]+(?:-[a-z]+){0,1}$"})


def test_a_malformed_keyword_is_refused_by_the_model_naming_it() -> None:
    with pytest.raises(DefinitionError, match=r"input\.odd\.properties"):
        parse_definition(_document(odd={"type": "object", "properties": {"a": {"tpye": "x"}}}))


def test_schema_nesting_and_pattern_length_are_bounded() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(8):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(LimitExceeded, match="input_schema_depth"):
        _registered(deep=deep)
    with pytest.raises(LimitExceeded, match="input_pattern_chars"):
        _registered(long={"type": "string", "pattern": "a" * 1001})
    _registered(long={"type": "string", "pattern": "a" * 1000})  # the limit itself is fine


def test_the_common_formats_are_available() -> None:
    assert {"email", "date-time", "date", "time", "uri", "uuid", "ipv4", "ipv6",
            "hostname"} <= FORMATS


def test_every_shipped_definition_and_catalogue_still_validates() -> None:
    examples = files("sagafleet.example_sagas")
    catalogues = [ToolCatalogue.from_yaml(examples.joinpath(name).read_text())
                  for name in ("trip_tools.yaml", "gated_tools.yaml")]
    assert catalogues[1].tools  # the gated catalogue loads too
    trip = SagaDefinition.from_yaml(examples.joinpath("trip.yaml").read_text())
    registered = validate_definition(trip, catalogues[0])
    assert validate_input(registered, TRIP_INPUT) == TRIP_INPUT


def test_a_thousand_bad_items_list_fifty_problems_and_say_there_are_more() -> None:
    passengers = [{"email": "nobody", "seat": 0}] * 3
    definition = _registered(**{**EXTRA_FIELDS, "passengers": {**PASSENGERS, "max_length": 2000}})
    with pytest.raises(InputValidationError) as caught:
        validate_input(definition, {**GOOD, "passengers": passengers * 400})
    problems = caught.value.problems
    assert len(problems) == 51
    assert Problem("input.passengers", "more_problems",
                   "more problems than the 50 listed") in problems


def test_a_fields_compiled_schema_is_kept_by_field_and_is_the_one_its_schema_compiles_to(
) -> None:
    from saga_core.canonical_json import canonical_json
    from saga_core.definitions import input_schema
    from saga_core.definitions.definition import InputField

    field = InputField.model_validate(TRAVELLER)
    # the kept validator and quick check are the plain path's (its schema's canonical text)
    plain = input_schema._compiled(canonical_json(field.json_schema()))
    assert input_schema.compiled_field(field) is plain
    assert input_schema.compiled_field(field) is plain  # found by field object now
    # an equal field object (another definition load) finds the same one
    again = InputField.model_validate(TRAVELLER)
    assert again is not field and input_schema.compiled_field(again) is plain
    # a field of another schema never gets a kept one of another field
    other = InputField.model_validate({**TRAVELLER, "required": False, "properties": {
        "name": {"type": "integer"}}})
    assert input_schema.compiled_field(other) is not plain
    assert input_schema.value_problems("input.t", other, {"name": "Ada"}) == [
        Problem("input.t.name", "wrong_type", "expected integer, got str")]


def test_the_kept_compiled_schemas_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from saga_core.definitions import input_schema
    from saga_core.definitions.definition import InputField

    monkeypatch.setattr(input_schema, "_by_field", {})
    fields = [InputField(type="string", max_length=n) for n in range(5)]
    monkeypatch.setattr(input_schema, "FIELDS_REMEMBERED", 3)
    for field in fields:
        input_schema.compiled_field(field)
    assert len(input_schema._by_field) <= 3
    # and a forgotten field is checked as before
    assert input_schema.value_problems("input.x", fields[1], "ab") == [
        Problem("input.x", "too_long", "length must be <= 1")]
