"""A pydantic error told to a caller names the field and the rule, never the value refused."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from saga_core.definitions.definition import parse_definition
from saga_core.errors import DefinitionError
from saga_core.field_errors import PART_CHARS, field_errors

SECRET = "tok_visa_4242_SECRET"


class _Card(BaseModel):
    kind: Literal["card"]


class _Bank(BaseModel):
    kind: Literal["bank"]


class _Order(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount: int = Field(ge=0)
    code: str = Field(default="a", max_length=3, pattern=r"^[a-z]+$")
    ref: uuid.UUID | None = None
    method: Annotated[_Card | _Bank, Field(discriminator="kind")] | None = None
    note: str = ""
    extras: dict[str, int] = Field(default_factory=dict)

    @field_validator("note")
    @classmethod
    def _quiet(cls, note: str) -> str:
        if note.startswith("tok_"):
            raise ValueError(f"a note must not hold a card token, got {note!r}")
        if note == "loud":
            raise ValueError("a note must not shout")
        return note


def _told(data: object) -> list[tuple[str, str, str]]:
    with pytest.raises(ValidationError) as caught:
        _Order.model_validate(data)
    return [(e.path, e.rule, e.message) for e in field_errors(caught.value)]


def test_the_value_refused_is_never_in_the_message() -> None:
    # when every field is wrong, each in a way pydantic's own text would quote
    told = _told({"amount": SECRET, "code": SECRET, "ref": SECRET,
                  "method": {"kind": SECRET}, "note": SECRET, "extras": {"k": SECRET}})
    # then each field is named with its rule, and the value is nowhere
    assert [(path, rule) for path, rule, _ in told] == [
        ("amount", "int_parsing"), ("code", "string_too_long"), ("ref", "uuid_parsing"),
        ("method", "union_tag_invalid"), ("note", "value_error"), ("extras.k", "int_parsing")]
    assert SECRET not in json.dumps(told)
    assert SECRET[:4] not in json.dumps(told)


def test_a_message_made_of_the_schema_or_the_validators_words_is_kept() -> None:
    told = dict(((path, rule), message) for path, rule, message in
                _told({"amount": -1, "code": "AB", "note": "loud", "surplus": 1}))
    assert told[("amount", "greater_than_equal")] == "Input should be greater than or equal to 0"
    assert "[a-z]" in told[("code", "string_pattern_mismatch")]
    assert told[("note", "value_error")] == "Value error, a note must not shout"
    assert told[("surplus", "extra_forbidden")] == "Extra inputs are not permitted"


def test_a_long_key_in_a_path_is_cut() -> None:
    told = _told({"amount": 1, "extras": {"k" * 1000: "x"}})
    (path, _, _), = told
    assert len(path) <= len("extras.") + PART_CHARS + 1


def test_a_rejected_definition_does_not_echo_its_name_or_values() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_definition({"name": f"<b>{SECRET}</b>", "version": 1, "steps": [
            {"id": "s", "tool": "t", "semantics": SECRET}]})
    assert SECRET not in str(caught.value)
    assert "'?'" in str(caught.value)  # the name is no definition's: not quoted either
