"""Saga input validation against a definition's declared input fields."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from saga_core.definition import InputField, SagaDefinition
from saga_core.errors import InputValidationError, Problem
from saga_core.keys import json_value_problem
from saga_core.limits import SAGA_INPUT_BYTES, measure_json

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def _type_ok(spec: InputField, value: Any) -> bool:
    # bool is an int in Python but never a number in JSON.
    if isinstance(value, bool) and spec.type != "boolean":
        return False
    return isinstance(value, _PY_TYPES[spec.type])


def _within(value: float, relation: str, limit: float) -> bool:
    return {
        ">=": value >= limit,
        "<=": value <= limit,
        ">": value > limit,
        "<": value < limit,
    }[relation]


def field_problems(name: str, spec: InputField, value: Any) -> list[Problem]:
    """Every rule ``value`` breaks for field ``name`` (type, range, length, enum)."""
    where = f"input.{name}"
    if not _type_ok(spec, value):
        return [Problem(where, "wrong_type", f"expected {spec.type}, got {type(value).__name__}")]
    unstorable = json_value_problem(value)
    if unstorable is not None:
        return [Problem(where, "not_json", unstorable)]
    problems: list[Problem] = []
    if isinstance(value, int | float) and not isinstance(value, bool):
        bounds = (
            (spec.minimum, ">="),
            (spec.maximum, "<="),
            (spec.exclusive_minimum, ">"),
            (spec.exclusive_maximum, "<"),
        )
        for limit, relation in bounds:
            if limit is not None and not _within(value, relation, limit):
                problems.append(Problem(where, "out_of_range", f"must be {relation} {limit}"))
    if isinstance(value, str | list):
        if spec.min_length is not None and len(value) < spec.min_length:
            problems.append(Problem(where, "too_short", f"length must be >= {spec.min_length}"))
        if spec.max_length is not None and len(value) > spec.max_length:
            problems.append(Problem(where, "too_long", f"length must be <= {spec.max_length}"))
    if spec.enum is not None and value not in spec.enum:
        problems.append(Problem(where, "not_in_enum", f"must be one of {spec.enum}"))
    return problems


def validate_input(
    definition: SagaDefinition, data: Any, *, by_ref: Collection[str] = ()
) -> dict[str, Any]:
    """Return the normalized input (defaults filled) or raise listing every bad field.

    Fields named in ``by_ref`` hold a reference to a value stored elsewhere (a secret
    ref): they are left out here, and their values checked with :func:`field_problems`
    once known. :class:`~saga_core.limits.LimitExceeded` comes before anything else for
    an input over ``saga_input_bytes`` or ``json_depth``.
    """
    measure_json("saga input", data, SAGA_INPUT_BYTES)
    if not isinstance(data, dict):
        raise InputValidationError(
            definition.name, [Problem("input", "wrong_type", "input must be a JSON object")]
        )
    problems: list[Problem] = []
    normalized: dict[str, Any] = {}
    for name in data:
        if name not in definition.input:
            problems.append(Problem(f"input.{name}", "unknown_field", "not declared"))
    for name, spec in definition.input.items():
        if name in by_ref:
            continue
        if name not in data:
            if spec.required:
                problems.append(Problem(f"input.{name}", "missing", "required field"))
            elif spec.default is not None:
                normalized[name] = spec.default
            continue
        value_problems = field_problems(name, spec, data[name])
        problems.extend(value_problems)
        if not value_problems:
            normalized[name] = data[name]
    if problems:
        raise InputValidationError(definition.name, problems)
    return normalized
