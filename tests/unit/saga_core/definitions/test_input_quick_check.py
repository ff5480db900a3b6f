"""A start's input fields are accepted by a quick check compiled beside each field's
``jsonschema`` validator; whatever it accepts, ``jsonschema`` finds nothing wrong with, so a
value's problems are the same with the quick check as by ``jsonschema`` alone
(:func:`reference_value_problems`), for every field a definition can declare and every value."""

from __future__ import annotations

import enum
import math
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from saga_core.definitions.definition import InputField
from saga_core.definitions.input_schema import (
    compiled_field,
    quick_check,
    reference_value_problems,
    value_problems,
)
from saga_core.errors import Problem
from sagafleet.example_sagas import trip_definition
from tests.trip_inputs import TRIP_INPUT

WHERE = "input.field"
NAMES = ("a", "b", "c")
PATTERNS = ("^[A-Z]{2}[0-9]{3}$", "a", "^$", "😀", r"^\d+$", "^.{2}$", "é|e")
FORMATS = ("email", "date", "date-time", "uri", "ipv4", "hostname", "uuid")
SAMPLES: tuple[Any, ...] = (
    True, False, 0, 1, -1, 1.0, 0.5, -0.0, 1e308, -1e308, 2**53, 2**53 + 1, 2**70,
    math.nan, math.inf, "", "a", "😀", "a😀", "😀😀😀", "é", "e\u0301", "\x00", "\ud800",
    "ada@example.com", "ada@", "2026-12-24", "2026-12-24T08:30:00Z", "https://example.com",
    "10.0.0.1", "AB123", "12", None, [], {},
)
"""Values that sit on the rules' edges: booleans beside ints, integral floats, the largest
floats, what JSON cannot hold, astral and combining characters, the formats' own shapes."""

scalars = st.one_of(
    st.sampled_from(SAMPLES), st.none(), st.booleans(), st.integers(),
    st.floats(), st.text(max_size=6),
    st.text(st.characters(min_codepoint=0x10000), max_size=4),  # astral: one code point each
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=2), inner, max_size=4),
    max_leaves=12,
)
bounds = st.one_of(st.integers(-5, 5), st.sampled_from((0.5, 1.0, 2**53, 1e308, -1e308)),
                   st.floats(allow_nan=False, allow_infinity=False))
enum_members = st.one_of(st.booleans(), st.sampled_from([v for v in SAMPLES if not (
                             isinstance(v, float) and not math.isfinite(v))]),
                         st.text(max_size=2), st.integers(-3, 3), st.lists(st.integers(0, 1)))


@st.composite
def declared_fields(draw: st.DrawFn, levels: int = 3, *, top: bool = True) -> dict[str, Any]:
    """An input field as a definition declares it: a type and the keywords registration
    lets it carry (bounds, lengths and enums on any type; pattern and format on strings,
    properties on objects, items on arrays), nested at most ``levels`` deep."""
    kind = draw(st.sampled_from(
        ("string", "integer", "number", "boolean") + (("object", "array") if levels else ())))
    field: dict[str, Any] = {"type": kind, "required": draw(st.booleans())}
    for name in ("minimum", "maximum", "exclusive_minimum", "exclusive_maximum"):
        if draw(st.integers(0, 3)) == 0:
            field[name] = draw(bounds)
    for name in ("min_length", "max_length"):
        if draw(st.booleans()):
            field[name] = draw(st.integers(0, 4))
    if draw(st.integers(0, 2)) == 0:
        field["enum"] = draw(st.lists(enum_members, min_size=1, max_size=4))
    if draw(st.integers(0, 5)) == 0:
        field["default"] = draw(st.text(max_size=3) | st.integers())
    if draw(st.integers(0, 5)) == 0:
        field["description"] = "Some field."
    if kind == "string":
        if draw(st.integers(0, 2)) == 0:
            field["pattern"] = draw(st.sampled_from(PATTERNS))
        if draw(st.integers(0, 2)) == 0:
            field["format"] = draw(st.sampled_from(FORMATS))
        field["secret"] = top and draw(st.booleans())
    if kind == "object":
        if draw(st.booleans()):
            names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
            field["properties"] = {name: draw(declared_fields(levels - 1, top=False))
                                   for name in names}
        field["additional_properties"] = draw(st.sampled_from((None, True, False)))
    if kind == "array" and draw(st.booleans()):
        field["items"] = draw(declared_fields(levels - 1, top=False))
    return field


def look_alikes(member: Any) -> list[Any]:
    """``member`` and the values JSON Schema tells apart from it or not: True and 1, 1 and 1.0."""
    if isinstance(member, bool):
        return [member, int(member), float(member)]
    if isinstance(member, int | float) and math.isfinite(member):
        return [member, int(member), float(member)] + ([bool(member)] if member in (0, 1) else [])
    return [member]


text_near = st.one_of(st.characters(max_codepoint=0x7F), st.characters(min_codepoint=0x80),
                      st.characters(min_codepoint=0x10000), st.sampled_from("\u0301é😀"))
"""Characters of every UTF-8 width: a length counts them, not their bytes."""


def lengths_near(field: InputField) -> st.SearchStrategy[int]:
    """Lengths on either side of the field's bounds, and some between."""
    low, high = field.min_length or 0, field.max_length or 3
    return st.sampled_from(sorted({n for n in (low - 1, low, high, high + 1) if n >= 0})
                           ) | st.integers(0, 4)


@st.composite
def values_for(draw: st.DrawFn, field: InputField) -> Any:
    """A value near what ``field`` accepts (often valid, often one rule off), or any value."""
    if draw(st.integers(0, 3)) == 0:
        return draw(json_values)
    if field.enum and draw(st.booleans()):
        return draw(st.sampled_from([v for m in field.enum for v in look_alikes(m)]))
    if field.type == "string":
        if field.pattern is not None and draw(st.booleans()):
            return draw(st.from_regex(field.pattern))
        size = draw(lengths_near(field))
        return draw(st.text(text_near, min_size=size, max_size=size))
    if field.type in ("integer", "number"):
        low = field.minimum if field.minimum is not None else field.exclusive_minimum
        high = field.maximum if field.maximum is not None else field.exclusive_maximum
        edges = [v for bound in (field.minimum, field.maximum, field.exclusive_minimum,
                                 field.exclusive_maximum) if bound is not None
                 for v in look_alikes(bound)]
        if draw(st.booleans()) and edges:
            return draw(st.sampled_from(edges))
        if low is not None and high is not None and math.ceil(low) > math.floor(high):
            low = high = None  # no integer between the bounds: any will do
        integers = st.integers(min_value=None if low is None else math.ceil(low),
                               max_value=None if high is None else math.floor(high))
        if field.type == "integer":
            return draw(integers)
        return draw(st.floats(min_value=low, max_value=high, allow_nan=False) | integers)
    if field.type == "boolean":
        return draw(st.booleans())
    if field.type == "object":
        given = {name: draw(values_for(child)) for name, child in (field.properties or {}).items()
                 if draw(st.integers(0, 4 if child.required else 1)) > 0}
        if draw(st.integers(0, 2)) == 0:
            given[draw(st.sampled_from((*NAMES, "x")))] = draw(json_values)  # maybe undeclared
        return given
    item = field.items
    items = json_values if item is None else st.deferred(lambda: values_for(item))
    size = draw(lengths_near(field))
    return draw(st.lists(items, min_size=size, max_size=size))


@st.composite
def fields_and_values(draw: st.DrawFn, levels: int) -> tuple[InputField, Any]:
    field = InputField.model_validate(draw(declared_fields(levels)))
    return field, draw(values_for(field))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields_and_values(levels=3))
def test_with_the_quick_check_every_value_has_the_problems_jsonschema_finds(
    field_and_value: tuple[InputField, Any],
) -> None:
    _same_problems_both_ways(*field_and_value)


@settings(max_examples=800, deadline=None)
@given(fields_and_values(levels=0))
def test_with_the_quick_check_every_scalar_has_the_problems_jsonschema_finds(
    field_and_value: tuple[InputField, Any],
) -> None:
    # the same property, drawn where most fields are declared: strings, numbers, booleans
    _same_problems_both_ways(*field_and_value)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4), st.none() | st.integers(0, 4), st.text(text_near, max_size=5))
def test_a_strings_length_is_judged_by_code_points_both_ways(
    min_length: int, max_length: int | None, text: str,
) -> None:
    field = InputField(type="string", min_length=min_length, max_length=max_length)
    _same_problems_both_ways(field, text)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(("string", "integer", "number", "boolean")),
       st.lists(enum_members, min_size=1, max_size=3), st.data())
def test_an_enum_tells_booleans_from_numbers_both_ways(
    kind: str, members: list[Any], data: st.DataObject,
) -> None:
    field = InputField.model_validate({"type": kind, "enum": members})
    value = data.draw(st.sampled_from([v for m in members for v in look_alikes(m)])
                      | enum_members)
    _same_problems_both_ways(field, value)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES), declared_fields(levels=0, top=False), max_size=3),
       st.sampled_from((None, True, False)), st.data())
def test_an_objects_required_and_undeclared_members_are_judged_alike_both_ways(
    properties: dict[str, Any], additional: bool | None, data: st.DataObject,
) -> None:
    field = InputField.model_validate(
        {"type": "object", "properties": properties, "additional_properties": additional})
    _same_problems_both_ways(field, data.draw(values_for(field)))


def _same_problems_both_ways(field: InputField, value: Any) -> None:
    # given a field as a definition declares it, and a value for it
    quick = compiled_field(field).quick
    assert quick is not None  # every keyword an input field compiles to is decided
    # when its problems are found with the quick check and without
    found = value_problems(WHERE, field, value)
    # then they are the same: the quick check only ever accepts what jsonschema accepts
    assert found == reference_value_problems(WHERE, field, value)
    event("accepted by the quick check" if quick.accepts(value) else "judged by jsonschema")


def test_the_trip_inputs_fields_are_each_accepted_by_the_quick_check() -> None:
    trip = trip_definition()
    for name, field in trip.input.items():
        quick = compiled_field(field).quick
        assert quick is not None and quick.accepts(TRIP_INPUT[name]), name
        assert reference_value_problems(f"input.{name}", field, TRIP_INPUT[name]) == []


def test_a_boolean_or_an_integral_float_is_not_an_integer_for_the_quick_check_either() -> None:
    nights = InputField(type="integer", minimum=1)
    quick = compiled_field(nights).quick
    assert quick is not None and quick.accepts(2)
    for value in (True, 2.0):
        assert not quick.accepts(value)
        assert value_problems("input.nights", nights, value) == [
            Problem("input.nights", "wrong_type",
                    f"expected integer, got {type(value).__name__}")]


def test_a_length_counts_code_points_astral_ones_included() -> None:
    code = InputField(type="string", min_length=2, max_length=2)
    quick = compiled_field(code).quick
    assert quick is not None and quick.accepts("😀😀")
    assert value_problems("input.code", code, "😀😀😀") == [
        Problem("input.code", "too_long", "length must be <= 2")]


def test_an_enum_tells_true_from_1_and_takes_1_for_1_0() -> None:
    level = InputField(type="number", enum=[1.0, "one"])
    quick = compiled_field(level).quick
    assert quick is not None and quick.accepts(1) and quick.accepts(1.0)
    assert not quick.accepts(True)
    flag = InputField(type="boolean", enum=[1])
    assert value_problems("input.flag", flag, True) == [
        Problem("input.flag", "not_in_enum", "must be one of [1]")]


def test_a_value_the_quick_check_cannot_decide_is_left_to_jsonschema() -> None:
    class Seats(enum.IntEnum):
        TWO = 2

    seats = InputField(type="integer", minimum=1)
    quick = compiled_field(seats).quick
    assert quick is not None and not quick.accepts(Seats.TWO)  # an int subclass: not sure
    assert value_problems("input.seats", seats, Seats.TWO) == []  # jsonschema's isinstance


def test_a_schema_with_a_keyword_the_quick_check_does_not_decide_has_none() -> None:
    assert quick_check({"type": "integer", "multipleOf": 2}) is None
    assert quick_check({"type": "object", "properties": {"a": {"type": "string",
                                                              "const": "x"}}}) is None
    assert quick_check({"type": "array", "items": {"type": ["string", "null"]}}) is None
    assert quick_check({"type": "integer", "minimum": True}) is None


def test_what_json_cannot_hold_is_refused_before_any_schema_rule() -> None:
    amount = InputField(type="number", minimum=0)
    assert value_problems("input.amount", amount, math.nan) == reference_value_problems(
        "input.amount", amount, math.nan) == [Problem(
            "input.amount", "not_json",
            "nan is not a JSON number (NaN and infinities are refused)")]
