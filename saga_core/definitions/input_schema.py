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
  that never repeats the value (it may be a secret). A value the field's :class:`QuickCheck`
  (compiled beside its validator) accepts is valid without a walk of ``jsonschema``; any other
  is judged by ``jsonschema`` as :func:`reference_value_problems`, the plain path, judges all.

``jsonschema`` is a pure library: it reads no file and opens no connection here (the
schemas it sees are compiled from input fields, which cannot hold a ``$ref``).
"""

from __future__ import annotations

import json
import re
import re._constants as sre
import re._parser as sre_parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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

_KINDS: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,),
}
"""The exact Python types the quick check accepts for each JSON type: a subclass (an
``IntEnum``, an ``OrderedDict``) is left to ``jsonschema``, which decides it by isinstance."""

_ANNOTATIONS: Final = frozenset({"description", "default", "writeOnly", "x-secret"})
"""Keywords an input field's schema carries that ``jsonschema`` does not validate."""

_QUICK_KEYWORDS: Final = frozenset({
    "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "minItems", "maxItems", "enum", "pattern", "format", "properties", "required",
    "additionalProperties", "items", *_ANNOTATIONS})
"""The keywords :func:`quick_check` decides; a schema with any other goes to jsonschema."""

_ENUM_KINDS: Final = frozenset({str, int, float})
"""The kinds of value an enum is decided for: jsonschema's equality (where True is not 1) is
plain equality on them, which a set finds (1 == 1.0, and equal numbers hash equal)."""


@dataclass(frozen=True, slots=True)
class QuickCheck:
    """One field schema's acceptance test, compiled once: ``True`` means ``jsonschema`` finds
    nothing wrong with the value, ``False`` only "ask ``jsonschema``".

    A start's input is almost always valid, and walking ``jsonschema``'s validator (keyword
    dispatch, type checks, lazy errors) for each field costs more than the rest of the
    validation. Each keyword here makes ``jsonschema``'s own comparison, on the kinds of value
    its rule applies to (a minimum to numbers, a length to strings); a value of a kind not in
    :data:`_KINDS`, an enum over other kinds than :data:`_ENUM_KINDS`, and every "no" go to
    ``jsonschema``, whose errors are the problems' words.
    """

    kinds: tuple[type, ...]
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    min_length: int = 0
    max_length: int | None = None
    min_items: int = 0
    max_items: int | None = None
    enum: frozenset[str | int | float] | None = None
    pattern: re.Pattern[str] | None = None
    format: str | None = None
    properties: tuple[tuple[str, QuickCheck], ...] = ()
    required: tuple[str, ...] = ()
    declared: frozenset[str] | None = None  # the only keys allowed (additionalProperties false)
    items: QuickCheck | None = None

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (storable JSON: no NaN, no infinity) is valid for sure."""
        kind = type(value)
        if kind not in self.kinds:
            return False
        if self.enum is not None and not (kind in _ENUM_KINDS and value in self.enum):
            return False
        if self.format is not None and not FORMAT_CHECKER.conforms(value, self.format):
            return False  # jsonschema checks a format on every kind of value
        if kind is str:
            length = len(value)  # code points, as jsonschema counts them
            return (self.min_length <= length
                    and (self.max_length is None or length <= self.max_length)
                    and (self.pattern is None or self.pattern.search(value) is not None))
        if kind is int or kind is float:
            # jsonschema's comparisons, negated (an int and a float bound compare exactly)
            return ((self.minimum is None or not value < self.minimum)
                    and (self.maximum is None or not value > self.maximum)
                    and (self.exclusive_minimum is None or not value <= self.exclusive_minimum)
                    and (self.exclusive_maximum is None or not value >= self.exclusive_maximum))
        if kind is dict:
            return (all(name in value for name in self.required)
                    and (self.declared is None or all(key in self.declared for key in value))
                    and all(check.accepts(value[name]) for name, check in self.properties
                            if name in value))
        if kind is list:
            return (self.min_items <= len(value)
                    and (self.max_items is None or len(value) <= self.max_items)
                    and (self.items is None or all(map(self.items.accepts, value))))
        return True  # a boolean: only its type, enum and format apply


def quick_check(schema: Any) -> QuickCheck | None:
    """The :class:`QuickCheck` of a field's compiled JSON Schema, or None when the schema holds
    a keyword, or a keyword's value, other than those an input field compiles to."""
    if not (isinstance(schema, dict) and schema.keys() <= _QUICK_KEYWORDS
            and _plain_keywords(schema)):
        return None
    properties: list[tuple[str, QuickCheck]] = []
    for name, child_schema in schema.get("properties", {}).items():
        child = quick_check(child_schema)
        if child is None:
            return None
        properties.append((name, child))
    items = None
    if "items" in schema:
        items = quick_check(schema["items"])
        if items is None:
            return None
    enum = schema.get("enum")
    pattern = schema.get("pattern")
    return QuickCheck(
        kinds=_KINDS[schema["type"]],
        minimum=schema.get("minimum"), maximum=schema.get("maximum"),
        exclusive_minimum=schema.get("exclusiveMinimum"),
        exclusive_maximum=schema.get("exclusiveMaximum"),
        min_length=schema.get("minLength", 0), max_length=schema.get("maxLength"),
        min_items=schema.get("minItems", 0), max_items=schema.get("maxItems"),
        enum=None if enum is None else frozenset(m for m in enum if type(m) in _ENUM_KINDS),
        # what jsonschema's re.search(pattern, value) compiles (and caches)
        pattern=None if pattern is None else re.compile(pattern),
        format=schema.get("format"),
        properties=tuple(properties), required=tuple(schema.get("required", ())),
        declared=(frozenset(schema.get("properties", ()))
                  if schema.get("additionalProperties") is False else None),
        items=items,
    )


def _plain_keywords(schema: dict[str, Any]) -> bool:
    """Whether each keyword of ``schema`` (its subschemas apart) has a value of the shape an
    input field compiles it to: anything else is left to jsonschema, to judge or to refuse."""
    def shaped(keyword: str, *kinds: type) -> bool:
        return keyword not in schema or type(schema[keyword]) in kinds

    type_ = schema.get("type")
    pattern = schema.get("pattern")
    return (isinstance(type_, str) and type_ in _KINDS
            and all(shaped(k, int, float) for k in ("minimum", "maximum", "exclusiveMinimum",
                                                    "exclusiveMaximum"))
            and all(shaped(k, int) for k in ("minLength", "maxLength", "minItems", "maxItems"))
            and shaped("enum", list) and shaped("format", str) and shaped("properties", dict)
            and shaped("additionalProperties", bool) and shaped("required", list)
            and all(type(name) is str for name in schema.get("required", ()))
            and (pattern is None or (type(pattern) is str and _compiles(pattern))))


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False  # jsonschema meets it as it would have without the quick check
    return True


@dataclass(frozen=True)
class CompiledField:
    """An input field's JSON Schema compiled twice: ``jsonschema``'s validator (the reference;
    every problem is in its words) and the :class:`QuickCheck` that answers "valid" without it
    (None when the schema holds a keyword the quick check does not decide)."""

    validator: Any
    quick: QuickCheck | None


@lru_cache(maxsize=512)
def _compiled(schema_json: str) -> CompiledField:
    """A compiled field per distinct schema (a definition's fields repeat across sagas)."""
    schema = json.loads(schema_json)
    return CompiledField(InputValidator(schema, format_checker=FORMAT_CHECKER),
                         quick_check(schema))


FIELDS_REMEMBERED: Final = 1024
"""How many input fields' compiled schemas :func:`compiled_field` keeps by field object."""

_by_field: dict[int, tuple[InputField, CompiledField]] = {}


def compiled_field(spec: InputField) -> CompiledField:
    """The compiled validator and quick check of ``spec``'s JSON Schema.

    Kept by field object too: a process starts sagas of the same cached definitions, whose
    field objects recur, and building a field's schema and its canonical JSON only to find
    the validator cost a start more than validating (a frozen field never changes; the kept
    field keeps its id from being reused). :func:`_compiled` by schema text is the plain
    path, and a field object not kept (or forgotten) still finds it there.
    """
    kept = _by_field.get(id(spec))
    if kept is not None and kept[0] is spec:
        return kept[1]
    compiled = _compiled(canonical_json(spec.json_schema()))
    if len(_by_field) >= FIELDS_REMEMBERED:
        _by_field.clear()  # definitions come and go rarely: start over rather than track age
    _by_field[id(spec)] = (spec, compiled)
    return compiled


def value_problems(where: str, spec: InputField, value: Any) -> list[Problem]:
    """Every rule ``value`` breaks for the input field ``spec`` at ``where``.

    A value the field's quick check accepts breaks none; any other is judged by jsonschema,
    as :func:`reference_value_problems` judges every value, so each problem reads the same.
    """
    unstorable = json_value_problem(value)
    if unstorable is not None:
        return [Problem(where, "not_json", unstorable)]
    compiled = compiled_field(spec)
    if compiled.quick is not None and compiled.quick.accepts(value):
        return []
    return _listed_problems(where, compiled.validator, value)


def reference_value_problems(where: str, spec: InputField, value: Any) -> list[Problem]:
    """:func:`value_problems` by ``jsonschema`` alone, the quick check left out: the plain
    path the tests hold :func:`value_problems` equal to."""
    unstorable = json_value_problem(value)
    if unstorable is not None:
        return [Problem(where, "not_json", unstorable)]
    return _listed_problems(where, compiled_field(spec).validator, value)


def _listed_problems(where: str, validator: Any, value: Any) -> list[Problem]:
    """The problems ``jsonschema`` finds in ``value``, one per path and rule, at most
    :data:`PROBLEMS_LISTED` and a ``more_problems`` line."""
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


__all__ = ["FORMATS", "CompiledField", "InputValidator", "QuickCheck", "check_schema_size",
           "compiled_field", "quick_check", "reference_value_problems", "schema_problems",
           "value_problems"]
