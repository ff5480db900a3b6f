"""Input fields as JSON Schema (Draft 2020-12), checked by the ``jsonschema`` library.

Two questions, both answered as a list of :class:`~saga_core.errors.Problem`:

* :func:`schema_problems` — at registration: is this field a schema we can check? Its
  compiled schema must be valid Draft 2020-12 (a ``pattern`` must compile), every ``format``
  one the checker knows (an unknown one would be silently ignored), every keyword one that
  can apply to the field's type, no ``secret`` below the top level (masking works on whole
  top-level fields), and no pattern with nested quantifiers (exponential backtracking).
  Nesting and pattern length are bounded first (:func:`check_schema_size`,
  ``input_schema_depth`` and ``input_pattern_chars``: :class:`LimitExceeded`).
* :func:`value_problems` — when a saga starts: which rules does this value break? Each
  problem names the value's path (``input.traveller.emails[1]``) and a rule —
  ``wrong_type``, ``out_of_range``, ``too_short``, ``too_long``, ``not_in_enum``,
  ``missing``, ``unknown_field``, ``pattern_mismatch``, ``invalid_format`` — with a message
  that never repeats the value (it may be a secret).

``jsonschema`` is a pure library: it reads no file and opens no connection here (the
schemas it sees are compiled from input fields, which cannot hold a ``$ref``).
"""

from __future__ import annotations

import json
import re
import re._constants as sre
import re._parser as sre_parse
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any, Final

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.validators import extend

from saga_core.canonical_json import canonical_json
from saga_core.definitions.definition import InputField
from saga_core.errors import Problem
from saga_core.keys import json_value_problem
from saga_core.limits import INPUT_PATTERN_CHARS, INPUT_SCHEMA_DEPTH


def _integer(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 1.0 as an integer; an input's integers stay ints (a bool is neither).
    return isinstance(instance, int) and not isinstance(instance, bool)


# Draft 2020-12 with a strict integer and every format this installation can check.
InputValidator: Final[Any] = extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer),
)
FORMAT_CHECKER: Final = FormatChecker(formats=Draft202012Validator.FORMAT_CHECKER.checkers)
"""Draft 2020-12's format checkers (the ``format-nongpl`` extra's), with a real email check."""


def _email(instance: object) -> bool:
    # jsonschema's own check is only '"@" in value'; an itinerary needs somewhere to go: a
    # local part and a domain that is a host name (an address literal in brackets too).
    if not isinstance(instance, str):
        return True  # format applies to strings; the type keyword speaks for the rest
    local, at, domain = instance.rpartition("@")
    if not (at and local and domain) or any(c.isspace() for c in instance):
        return False
    if "@" in local and not (local.startswith('"') and local.endswith('"')):
        return False  # only a quoted local part may hold an @
    if domain.startswith("[") and domain.endswith("]"):
        return bool(domain[1:-1])
    return "." in domain.strip(".") and FORMAT_CHECKER.conforms(domain, "hostname")


FORMAT_CHECKER.checks("email")(_email)
FORMATS: Final = frozenset(FORMAT_CHECKER.checkers)
"""The ``format`` names an input field may use: each is checked, not only annotated."""

PROBLEMS_LISTED: Final = 50
"""Problems listed for one field at most; the rest are one ``more_problems`` line."""

_RULES: Final = {
    "type": "wrong_type",
    "minimum": "out_of_range",
    "maximum": "out_of_range",
    "exclusiveMinimum": "out_of_range",
    "exclusiveMaximum": "out_of_range",
    "minLength": "too_short",
    "minItems": "too_short",
    "maxLength": "too_long",
    "maxItems": "too_long",
    "enum": "not_in_enum",
    "required": "missing",
    "additionalProperties": "unknown_field",
    "pattern": "pattern_mismatch",
    "format": "invalid_format",
}
"""The problem rule of each JSON Schema keyword an input field compiles to."""

_RELATIONS: Final = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
                     "exclusiveMaximum": "<", "minLength": ">=", "minItems": ">=",
                     "maxLength": "<=", "maxItems": "<="}

_COUNTED: Final = {"minLength": "length", "maxLength": "length", "minItems": "item count",
                   "maxItems": "item count"}

_STRING_ONLY: Final = ("pattern", "format")


# -- registration ----------------------------------------------------------------------------

def _fields(where: str, spec: InputField, depth: int = 1) -> Iterator[tuple[str, InputField, int]]:
    """The field and every field nested in it, with its path and nesting level."""
    yield where, spec, depth
    for name, child in (spec.properties or {}).items():
        yield from _fields(f"{where}.{name}", child, depth + 1)
    if spec.items is not None:
        yield from _fields(f"{where}[]", spec.items, depth + 1)


def check_schema_size(where: str, spec: InputField) -> None:
    """Refuse a field nested deeper than ``input_schema_depth`` or with a pattern longer
    than ``input_pattern_chars`` (:class:`~saga_core.limits.LimitExceeded`), before any
    schema is compiled from it."""
    for path, field, depth in _fields(where, spec):
        INPUT_SCHEMA_DEPTH.check(f"{where} nesting", depth)
        if field.pattern is not None:
            INPUT_PATTERN_CHARS.check(f"{path} pattern", len(field.pattern))


def schema_problems(where: str, spec: InputField) -> list[Problem]:
    """Every reason ``spec`` (the input field at ``where``) cannot be checked as declared."""
    check_schema_size(where, spec)
    problems: list[Problem] = []
    for path, field, depth in _fields(where, spec):
        problems += _keyword_problems(path, field)
        if depth > 1 and field.secret:
            problems.append(Problem(path, "nested_secret", "only a top-level input field can "
                                    "be secret: mark the whole field secret"))
        if field.format is not None and field.format not in FORMATS:
            problems.append(Problem(path, "unknown_format", f"format {field.format!r} cannot "
                                    f"be checked; known: {', '.join(sorted(FORMATS))}"))
        if field.pattern is not None:
            problems += _pattern_problems(path, field.pattern)
    if not problems:
        try:
            InputValidator.check_schema(spec.json_schema(),
                                        format_checker=FORMAT_CHECKER)
        except SchemaError as exc:
            problems.append(Problem(where, "invalid_schema", str(exc.message)))
    return problems


def _keyword_problems(where: str, field: InputField) -> list[Problem]:
    """Keywords that can never apply to the field's type: a mistake, not a no-op."""
    misplaced = [name for name in _STRING_ONLY
                 if getattr(field, name) is not None and field.type != "string"]
    if field.type != "object":
        misplaced += [name for name in ("properties", "additional_properties")
                      if getattr(field, name) is not None]
    if field.type != "array" and field.items is not None:
        misplaced.append("items")
    return [Problem(where, "misplaced_keyword", f"{name} does not apply to a {field.type}")
            for name in misplaced]


def _pattern_problems(where: str, pattern: str) -> list[Problem]:
    try:
        parsed = sre_parse.parse(pattern)
    except re.error as exc:
        return [Problem(where, "invalid_pattern", f"pattern does not compile: {exc}")]
    if _nested_quantifier(parsed.data, inside_repeat=False):
        return [Problem(where, "backtracking_pattern",
                        "pattern repeats a sub-pattern of variable length (such as (a+)+): "
                        "matching it can take exponential time; repeat a fixed-length unit "
                        "or use a character class")]
    return []


def _nested_quantifier(items: Iterable[Any], *, inside_repeat: bool) -> bool:
    """Whether a variable repeat sits inside another repeat (the star-height > 1 shape of
    catastrophic backtracking). A heuristic, on the side of refusing."""
    for op, arg in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, high, body = arg
            if inside_repeat and low != high:
                return True
            if _nested_quantifier(body, inside_repeat=inside_repeat or high > 1):
                return True
        elif op is sre.SUBPATTERN:
            if _nested_quantifier(arg[-1], inside_repeat=inside_repeat):
                return True
        elif op is sre.BRANCH:
            if any(_nested_quantifier(branch, inside_repeat=inside_repeat) for branch in arg[1]):
                return True
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            if _nested_quantifier(arg[1], inside_repeat=inside_repeat):
                return True
    return False


# -- a saga's values ---------------------------------------------------------------------------

@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    """A compiled validator per distinct schema (a definition's fields repeat across sagas)."""
    return InputValidator(json.loads(schema_json),
                          format_checker=FORMAT_CHECKER)


FIELDS_REMEMBERED: Final = 1024
"""How many input fields' validators :func:`field_validator` keeps by field object."""

_by_field: dict[int, tuple[InputField, Any]] = {}


def field_validator(spec: InputField) -> Any:
    """The compiled validator of ``spec``'s JSON Schema.

    Kept by field object too: a process starts sagas of the same cached definitions, whose
    field objects recur, and building a field's schema and its canonical JSON only to find
    the validator cost a start more than validating (a frozen field never changes; the kept
    field keeps its id from being reused). :func:`_validator` by schema text is the plain
    path, and a field object not kept (or forgotten) still finds it there.
    """
    kept = _by_field.get(id(spec))
    if kept is not None and kept[0] is spec:
        return kept[1]
    validator = _validator(canonical_json(spec.json_schema()))
    if len(_by_field) >= FIELDS_REMEMBERED:
        _by_field.clear()  # definitions come and go rarely: start over rather than track age
    _by_field[id(spec)] = (spec, validator)
    return validator


def value_problems(where: str, spec: InputField, value: Any) -> list[Problem]:
    """Every rule ``value`` breaks for the input field ``spec`` at ``where``."""
    unstorable = json_value_problem(value)
    if unstorable is not None:
        return [Problem(where, "not_json", unstorable)]
    validator = field_validator(spec)
    problems: dict[tuple[str, str], Problem] = {}
    for error in validator.iter_errors(value):
        if len(problems) >= PROBLEMS_LISTED:
            # An array of a thousand bad items needs no thousand lines: stop looking.
            problems[(where, "more_problems")] = Problem(
                where, "more_problems", f"more problems than the {PROBLEMS_LISTED} listed")
            break
        for problem in _problems(where, error):
            problems.setdefault((problem.where, problem.rule), problem)
    return sorted(problems.values(), key=lambda p: (p.where, p.rule))


def _path(where: str, path: Iterable[Any]) -> str:
    return where + "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                           for part in path)


def _problems(where: str, error: ValidationError) -> list[Problem]:
    """The problems one ``jsonschema`` error stands for, in our words (never the value)."""
    at = _path(where, error.absolute_path)
    keyword = str(error.validator)
    rule = _RULES.get(keyword, keyword)
    expected = error.validator_value
    if keyword == "required":
        present = error.instance if isinstance(error.instance, dict) else {}
        return [Problem(f"{at}.{name}", rule, "required field")
                for name in expected if name not in present]
    if keyword == "additionalProperties":
        declared = error.schema.get("properties", {})
        return [Problem(f"{at}.{name}", rule, "not declared")
                for name in error.instance if name not in declared]
    if keyword == "type":
        message = f"expected {expected}, got {type(error.instance).__name__}"
    elif keyword in _RELATIONS:
        counted = _COUNTED.get(keyword)
        message = f"{counted + ' ' if counted else ''}must be {_RELATIONS[keyword]} {expected}"
    elif keyword == "enum":
        message = f"must be one of {expected}"
    elif keyword == "pattern":
        message = f"must match the pattern {expected}"
    elif keyword == "format":
        message = f"must be a valid {expected}"
    else:
        message = f"breaks {keyword}"
    return [Problem(at, rule, message)]


__all__ = ["FORMATS", "InputValidator", "check_schema_size", "schema_problems",
           "value_problems"]
