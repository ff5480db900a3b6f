"""What a pydantic ``ValidationError`` may tell the caller: where, which rule, why; never what.

pydantic's own rendering of an error carries the caller's value: ``str(error)`` shows every
``input_value``, and some messages quote a piece of the input (a discriminator's tag, the
character a UUID failed at, whatever a validator's ``ValueError`` said). A value may be a
card number, a token or markup meant for someone's page, so every place that turns a
``ValidationError`` into an answer (a tool error, a rejected definition or plan, a refused
setting, a malformed message) goes through :func:`field_errors`, which keeps:

* the field's path (``loc``), each part cut to :data:`PART_CHARS` characters (a key of a
  caller's object is a name, not a value, but its length is the caller's);
* the rule (pydantic's error type);
* pydantic's message only when everything it was rendered from is the schema's (bounds,
  patterns, expected literals: :data:`SCHEMA_CONTEXT`), or, for a validator's own
  ``ValueError``, when it holds no text of the input; otherwise a message made of the rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

__all__ = ["PART_CHARS", "SCHEMA_CONTEXT", "FieldError", "field_errors"]

PART_CHARS: Final = 64
"""The longest piece of a path shown (a dict key may be as long as the caller likes)."""
SCHEMA_CONTEXT: Final = frozenset({
    "expected", "pattern", "ge", "gt", "le", "lt", "multiple_of", "min_length", "max_length",
    "max_digits", "decimal_places", "whole_digits", "allowed_schemes", "class_name",
    "expected_tags", "discriminator", "field_type", "actual_length",
})
"""Context keys that come from the schema (or count the input), never from its text."""
OWN_MESSAGES: Final = frozenset({"value_error", "assertion_error"})
"""Error types whose message a validator wrote: shown unless it quotes the input."""
_SHORTEST_ECHO: Final = 3
"""Input text shorter than this is not looked for in a message (``"a"`` is in most words)."""
_LEAVES_LOOKED_AT: Final = 200


@dataclass(frozen=True)
class FieldError:
    """One field's problem: its dotted path (``""``: the whole document), rule and message."""

    path: str
    rule: str
    message: str


def field_errors(error: ValidationError) -> list[FieldError]:
    """Every error of ``error``, told without the caller's values."""
    found = []
    for item in error.errors(include_url=False):
        path = ".".join(_part(part) for part in item["loc"])
        found.append(FieldError(path, str(item["type"]), _message(item)))
    return found


def _part(part: object) -> str:
    text = str(part)
    return text if len(text) <= PART_CHARS else text[:PART_CHARS] + "…"


def _message(item: Any) -> str:
    rule = str(item["type"])
    context = item.get("ctx") or {}
    if rule in OWN_MESSAGES:
        message = str(item["msg"])
        if not any(text in message for text in _texts(item.get("input"))):
            return message
    elif set(context) <= SCHEMA_CONTEXT:
        return str(item["msg"])
    return f"is not valid ({rule.replace('_', ' ')})"


def _texts(value: object) -> Iterator[str]:
    """The text of the input's leaves (strings, and numbers as written; not an object's keys,
    which are names), breadth first, for as many leaves as are looked at."""
    level, seen = [value], 0
    while level and seen < _LEAVES_LOOKED_AT:
        below: list[object] = []
        for item in level:
            seen += 1
            if isinstance(item, dict):
                below += list(item.values())
            elif isinstance(item, list | tuple | set | frozenset):
                below += list(item)
            elif item is not None and not isinstance(item, bool):
                text = str(item)
                if len(text) >= _SHORTEST_ECHO:
                    yield text
        level = below
