"""The gateway's typed errors, and how any error becomes a tool error an LLM can act on.

A tool call never answers with a traceback: every :class:`SagaError` is reported with its
kind and, for rejected inputs and plans, every problem's field (``where``), rule and message.
Anything else is reported as an internal error without its text (it may hold server details).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from saga_core.errors import Problem, ProblemsError, SagaError


class GatewayError(SagaError):
    """Root of the errors the agent gateway raises itself."""


class BindingRefused(GatewayError):
    """The call cannot be bound to a tenant and actor (missing, malformed or not trusted)."""


class ArgumentsRejected(ProblemsError):
    """A tool's arguments are malformed; ``problems`` names every bad field at once."""

    def __init__(self, tool: str, problems: list[Problem]) -> None:
        self.tool = tool
        super().__init__(f"arguments of {tool} are invalid", problems)


# What an agent can do about each kind of error, by class name (most specific first).
_HINTS: dict[str, str] = {
    "InputValidationError": "fix the named input fields and call again with the same key",
    "PlanRejected": "fix every listed problem and propose the plan again",
    "ArgumentsRejected": "fix the named arguments and call again",
    "IdempotencyConflict": "this key already started a saga with other input: "
    "use a new idempotency key for a new request",
    "SagaNotFound": "check the saga id; sagas of other tenants are not visible",
    "DefinitionNotFound": "call list_sagas to see the registered definitions",
    "BindingRefused": "the server decides tenant and actor; check its configuration",
    "StoreUnavailable": "the store is unavailable: retry later with the same key",
}


def problems_of(error: ValidationError, *, prefix: str = "") -> list[Problem]:
    """Every pydantic validation error as a Problem naming its field and rule."""
    found = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        where = f"{prefix}.{path}" if prefix and path else (prefix or path or "arguments")
        found.append(Problem(where, str(item["type"]), str(item["msg"])))
    return found


def tool_error(error: BaseException) -> dict[str, Any]:
    """A JSON-ready report of ``error``: kind, message, every problem, and a hint."""
    if not isinstance(error, SagaError):
        return {"error": "InternalError",
                "message": "the gateway failed unexpectedly; the server log has details"}
    report: dict[str, Any] = {"error": type(error).__name__, "message": str(error)}
    if isinstance(error, ProblemsError):
        report["problems"] = [
            {"where": p.where, "rule": p.rule, "message": p.message} for p in error.problems
        ]
    for cls in type(error).__mro__:
        hint = _HINTS.get(cls.__name__)
        if hint is not None:
            report["hint"] = hint
            break
    return report
