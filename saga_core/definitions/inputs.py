"""Saga input validation against a definition's declared input fields.

The top level (unknown fields, missing ones, defaults, fields given by reference) is read
here; each value is checked against its field's JSON Schema by
:mod:`saga_core.definitions.input_schema`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from saga_core.definitions.definition import InputField, SagaDefinition
from saga_core.definitions.input_schema import value_problems
from saga_core.errors import InputValidationError, Problem
from saga_core.limits import SAGA_INPUT_BYTES, measure_json


def field_problems(name: str, spec: InputField, value: Any) -> list[Problem]:
    """Every rule ``value`` breaks for the top-level field ``name``: the field's JSON Schema
    (type, range, length, enum, pattern, format, nested properties and items), each problem
    naming the path inside the field (``input.traveller.email``) and the rule."""
    return value_problems(f"input.{name}", spec, value)


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
