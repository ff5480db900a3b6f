"""Who and what asked for a saga: the agent's request, the model, the prompt and the trace.

Recorded on ``SagaStarted`` (optional: sagas started before lineage existed fold the same),
shown by ``sagafleet audit``; its ``trace_id`` is also put in the metadata of every later
event of the saga (``saga_trace_id``), so a trace finds the saga's events and a saga names
its trace. The tool-contract snapshot is the definition's content hash, already on
``SagaStarted``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from saga_core.errors import ErrorKind, SagaError
from saga_core.limits import LINEAGE_CHARS

# A W3C trace-context / OpenTelemetry trace id: 32 lowercase hex digits, not all zero.
TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
TEXT_FIELDS: Final = ("agent_request_id", "model_name", "model_version", "prompt_version")
FIELDS: Final = (*TEXT_FIELDS, "trace_id")


class InvalidLineage(SagaError):
    """A lineage field is of the wrong type, blank, too long or (trace_id) not a trace id."""

    kind = ErrorKind.INVALID_INPUT
    hint = ("lineage fields are short identifiers; trace_id is 32 lowercase hex digits "
            "(a W3C / OpenTelemetry trace id)")


class Lineage(BaseModel):
    """Who and what asked for one saga start; every field optional."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_request_id: str | None = None
    model_name: str | None = None
    model_version: str | None = None
    # The prompt's or the agent policy's version: whichever decides what the agent asks.
    prompt_version: str | None = None
    trace_id: str | None = None

    def with_trace(self, trace_id: str) -> Lineage:
        """This lineage with ``trace_id`` (a valid one) when it names none."""
        if self.trace_id is not None:
            return self
        return self.model_copy(update={"trace_id": check_trace_id(trace_id)})


def new_trace_id() -> str:
    """A fresh random trace id (what a start given none records)."""
    return uuid.uuid4().hex


def check_trace_id(value: object, what: str = "trace_id") -> str:
    """``value`` if it is a trace id, else InvalidLineage naming ``what``."""
    if not isinstance(value, str) or not TRACE_ID.fullmatch(value) or set(value) == {"0"}:
        shown = f"a {type(value).__name__}" if not isinstance(value, str) else (
            f"{len(value)} characters" if len(value) > 64 else repr(value))
        raise InvalidLineage(
            f"{what} must be 32 lowercase hex digits, not all zero; got {shown}")
    return value


def lineage_problem(name: str, value: object) -> str | None:
    """What is wrong with one lineage field (None: nothing)."""
    if value is None:
        return None
    if name == "trace_id":
        try:
            check_trace_id(value)
        except InvalidLineage as exc:
            return str(exc)
        return None
    if not isinstance(value, str):
        return f"{name} must be a string, got {type(value).__name__}"
    if not value.strip():
        return f"{name} must not be blank"
    if len(value) > LINEAGE_CHARS.value:
        return (f"{name} is {len(value)} characters, which exceeds the limit "
                f"{LINEAGE_CHARS.name} of {LINEAGE_CHARS.value} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"{name} must not contain control characters"
    return None


def parse_lineage(value: object, what: str = "lineage") -> Lineage | None:
    """A caller's lineage (a Lineage, a mapping of its fields, or None), checked: every
    problem named in one InvalidLineage."""
    if value is None or isinstance(value, Lineage):
        fields: Mapping[str, Any] = value.model_dump() if isinstance(value, Lineage) else {}
    elif isinstance(value, Mapping):
        fields = value
    else:
        raise InvalidLineage(f"{what} must be an object, got {type(value).__name__}")
    unknown = sorted(str(k) for k in fields if k not in FIELDS)
    problems = [f"unknown field {k!r} (known: {', '.join(FIELDS)})" for k in unknown[:5]]
    problems += [p for k in FIELDS if (p := lineage_problem(k, fields.get(k))) is not None]
    if problems:
        raise InvalidLineage(f"{what}: " + "; ".join(problems))
    if value is None:
        return None
    return value if isinstance(value, Lineage) else Lineage(**dict(fields))


def lineage_json_schema() -> dict[str, Any]:
    """The JSON Schema of a lineage object, as the MCP gateway and its exported functions
    describe it to an agent."""
    text = {"type": "string", "minLength": 1, "maxLength": LINEAGE_CHARS.value}
    return {
        "type": "object",
        "description": "who and what asks (optional, recorded on the saga and shown by "
                       "its audit): your request id, your model and its version, your "
                       "prompt or policy version, and your trace id",
        "properties": {
            "agent_request_id": {**text, "description": "the agent's id for this request"},
            "model_name": {**text, "description": "the model deciding, e.g. its API name"},
            "model_version": {**text, "description": "the model's version or snapshot"},
            "prompt_version": {**text, "description": "the prompt's or policy's version"},
            "trace_id": {"type": "string", "pattern": "^[0-9a-f]{32}$",
                         "description": "your W3C / OpenTelemetry trace id (32 hex digits); "
                                        "the saga's events carry it"},
        },
        "additionalProperties": False,
    }
