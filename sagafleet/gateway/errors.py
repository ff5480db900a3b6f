"""The gateway's typed errors, and how any error becomes a tool error an LLM can act on.

A tool call never answers with a traceback: every :class:`SagaError` is reported with its
class, its kind, a hint chosen by kind (or the class's own), and, for rejected inputs and
plans, every problem's field (``where``), rule and message.
Anything else is reported as an internal error without its text (it may hold server details).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from pydantic import ValidationError

from saga_core.errors import ErrorKind, Problem, ProblemsError, SagaError
from saga_core.field_errors import field_errors


class GatewayError(SagaError):
    """Root of the errors the agent gateway raises itself."""


class BindingRefused(GatewayError):
    """The request tries to choose its tenant or actor, which only its token decides (a
    header of the HTTP request, or an argument of a tool call)."""

    kind = ErrorKind.INVALID_INPUT
    hint = ("tenant and actor come from your token; send the request without the "
            "X-Sagafleet-Tenant and X-Sagafleet-Actor headers and call tools without "
            "tenant or actor arguments")


class ArgumentsRejected(ProblemsError):
    """A tool's arguments are malformed; ``problems`` names every bad field at once."""

    hint = "fix the named arguments and call again"

    def __init__(self, tool: str, problems: list[Problem]) -> None:
        self.tool = tool
        super().__init__(f"arguments of {tool} are invalid", problems)


HINTS: Final[Mapping[ErrorKind, str]] = MappingProxyType({
    ErrorKind.INVALID_INPUT: "fix every listed problem and call again",
    ErrorKind.NOT_FOUND: "check the saga id or definition name (list_sagas lists the "
    "definitions); sagas of other tenants are not visible",
    ErrorKind.CONFLICT: "this contradicts what is already recorded: read the saga's status "
    "before acting again; a new request needs a new idempotency key",
    ErrorKind.UNAVAILABLE: "a server is unavailable: retry later with the same key",
    ErrorKind.MISCONFIGURED: "the server is misconfigured; its operator must fix what the "
    "message names",
    ErrorKind.INTEGRITY: "the saga's stored history cannot be read or does not check out; "
    "an operator must look (sagafleet verify)",
    ErrorKind.UNAUTHENTICATED: "the call carries no valid token: an operator must issue one "
    "(sagafleet principals add)",
    ErrorKind.FORBIDDEN: "this principal may not do that; a person with the named role must",
    ErrorKind.FAILURE: "the call failed; the message says why",
})
"""What an agent can do about each kind of error (a class's own ``hint`` comes first)."""


def hint_for(error: SagaError) -> str:
    """What an agent can do about ``error``: its class's own hint, else its kind's."""
    return error.hint or HINTS[error.kind]


def problems_of(error: ValidationError, *, prefix: str = "") -> list[Problem]:
    """Every pydantic validation error as a Problem naming its field and rule, never the
    value it refused (:func:`saga_core.field_errors.field_errors`)."""
    found = []
    for item in field_errors(error):
        path = item.path
        where = f"{prefix}.{path}" if prefix and path else (prefix or path or "arguments")
        found.append(Problem(where, item.rule, item.message))
    return found


def tool_error(error: BaseException) -> dict[str, Any]:
    """A JSON-ready report of ``error``: class, kind, message, every problem, and a hint."""
    if not isinstance(error, SagaError):
        return {"error": "InternalError",
                "message": "the gateway failed unexpectedly; the server log has details"}
    report: dict[str, Any] = {
        "error": type(error).__name__, "kind": str(error.kind), "message": str(error)
    }
    if isinstance(error, ProblemsError):
        report["problems"] = [
            {"where": p.where, "rule": p.rule, "message": p.message} for p in error.problems
        ]
    report["hint"] = hint_for(error)
    return report
