"""Canonical JSON, payload hashes, operation keys and approval action hashes.

Every identity in sagafleet is a sha256 over canonical JSON (sorted keys, compact separators,
``ensure_ascii=False``), so two processes that never met derive the same key from the same facts.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, NewType

from pydantic import AfterValidator

from saga_core.canonical_json import canonical_json
from saga_core.contracts import StepKind
from saga_core.errors import KeyReuseError
from saga_core.limits import JSON_DEPTH

OperationKey = NewType("OperationKey", str)


_json_string: Final[Callable[[str], str]] = json.encoder.encode_basestring


MAX_JSON_DEPTH: Final = JSON_DEPTH.value
"""How deeply arrays and objects may nest in arguments, inputs and event data: every
reader of the log (json decoding, folds, hashing) must be able to walk them back."""


_JSON_LEAVES: Final = frozenset({str, int, bool, type(None)})


def text_problem(text: str) -> str | None:
    """Why a string cannot be stored as PostgreSQL text or jsonb (a NUL character, or a
    lone surrogate, which is not Unicode text and has no UTF-8 form), or None."""
    if "\x00" in text:
        return "a string holds a NUL character, which PostgreSQL cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds a lone surrogate, which is not Unicode text"
    return None


def text_argument_problem(
    what: str, value: object, limit: int, *, blank: bool = False
) -> str | None:
    """What is wrong with the text argument ``what`` (a name, key, id or reason), as a
    message that names it, or None: not a string, empty or blank (unless ``blank``), over
    ``limit`` characters, or text :func:`text_problem` refuses. Each layer raises its own
    typed error with it."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__}"
    if not (blank or value.strip()):
        return f"{what} must not be empty"
    if len(value) > limit:
        return f"{what} is {len(value)} characters; the limit is {limit}"
    problem = text_problem(value)
    return None if problem is None else f"{what}: {problem}"


def json_value_problem(value: Any, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``value`` cannot be hashed canonically and stored (a NaN or an infinity, which
    JSON has no numbers for, a string :func:`text_problem` refuses, or arrays and objects
    nested more than ``max_depth`` levels), or None. Walks level by level, without
    recursion: the value may be hostile."""
    depth, level = 0, [value]
    while level:
        below: list[Any] = []
        containers = False
        for item in level:
            kind = type(item)
            if kind is str:
                problem = text_problem(item)
                if problem is not None:
                    return problem
            elif kind in _JSON_LEAVES:
                continue
            elif kind is float:
                if not math.isfinite(item):
                    return f"{item} is not a JSON number (NaN and infinities are refused)"
            elif kind is dict or isinstance(item, Mapping):
                below.extend(item.values())
                below.extend(key for key in item if type(key) is str)
                containers = True
            elif kind is list or isinstance(item, list | tuple):
                below.extend(item)
                containers = True
        depth += containers
        if depth > max_depth:
            return f"nested more than {max_depth} levels deep"
        level = below
    return None


def _finite_json(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse what :func:`json_value_problem` finds, as a validation error."""
    problem = json_value_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


JsonArgs = Annotated[dict[str, Any], AfterValidator(_finite_json)]
"""A JSON object of arguments (finite numbers only), as definitions and plans carry them."""


def sha256_hex(text: str) -> str:
    """Hex sha256 of a UTF-8 string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_hash(obj: Any) -> str:
    """The canonical payload hash stored next to an operation key."""
    return sha256_hex(canonical_json(obj))


def operation_key(
    saga_id: str, step_id: str, kind: StepKind, operation_version: int
) -> OperationKey:
    """The stable key of one logical effect: same across attempts, workers and replans."""
    # Deliberately no attempt number and no randomness: a retry must look like the same call.
    # The canonical JSON of [saga_id, step_id, kind, version], written out directly: every
    # fold derives these keys, so it is worth skipping the generic encoder.
    after = key_text_after_saga(step_id, kind, operation_version)
    if after is None:
        return OperationKey(payload_hash([saga_id, step_id, str(kind), operation_version]))
    return key_after_head(saga_key_head(saga_id), after)


def key_text_after_saga(step_id: str, kind: StepKind, operation_version: int) -> str | None:
    """What follows the saga id in the text :func:`operation_key` hashes (the same for every
    saga of a definition, so a fold can keep it); None for a version that is not an int,
    whose key the generic encoder writes."""
    if type(operation_version) is not int:
        return None
    return f",{_json_string(step_id)},{_json_string(str(kind))},{operation_version}]"


def saga_key_head(saga_id: str) -> str:
    """What the text :func:`operation_key` hashes begins with for ``saga_id`` (the same for
    every operation of the saga: a start's fold writes it once for all of them)."""
    return f"[{_json_string(saga_id)}"


def key_after_head(head: str, after: str) -> OperationKey:
    """:func:`operation_key` from the saga's :func:`saga_key_head` and the operation's
    :func:`key_text_after_saga` text."""
    return OperationKey(sha256_hex(f"{head}{after}"))


def action_hash(saga_id: str, step_id: str, kind: StepKind, args: dict[str, Any]) -> str:
    """What an approval is bound to: this saga, this step and kind, these resolved arguments."""
    return payload_hash({"saga_id": saga_id, "step_id": step_id, "kind": str(kind), "args": args})


def check_key_payload(recorded_hash: str | None, new_hash: str, key: str) -> None:
    """Raise :class:`KeyReuseError` when ``key`` was recorded with a different payload."""
    if recorded_hash is not None and recorded_hash != new_hash:
        raise KeyReuseError(key, recorded_hash, new_hash)
