"""Function-calling tool schemas (OpenAI and Anthropic styles) for frameworks without MCP.

The export holds every MCP tool with the same input schema the MCP server advertises, plus
one typed ``start_<definition>`` function per registered definition whose ``input`` is the
definition's own JSON Schema, so a model fills the fields rather than a free-form object.
:class:`FunctionRouter` runs such a call through the same gateway operations, as the principal
its caller passes (a trusted program's in-process agent, or one it proved from a token).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mcp.types import Tool as McpTool

from saga_core.access.roles import Principal
from saga_core.agents.lineage import lineage_json_schema
from saga_core.definitions.definition import SagaDefinition
from saga_core.errors import Problem, SagaError
from saga_core.limits import KEY_CHARS
from sagafleet.gateway.binding import choosing_arguments
from sagafleet.gateway.errors import ArgumentsRejected, BindingRefused, tool_error
from sagafleet.gateway.service import GatewayService

ExportFormat = Literal["openai", "anthropic"]
START_PREFIX = "start_"
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
_DROP_KEYS = frozenset({"$schema", "x-secret", "writeOnly"})


@dataclass(frozen=True)
class FunctionSpec:
    """One callable function: a name a model may use, a description and a JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]


def function_name(definition_name: str) -> str:
    """The function name that starts a definition (``[A-Za-z0-9_-]{1,64}``)."""
    return (START_PREFIX + _NAME_OK.sub("_", definition_name))[:64]


def _portable(schema: Any) -> Any:
    """A schema without keys some function-calling APIs reject; secrets said in words."""
    if isinstance(schema, list):
        return [_portable(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned = {k: _portable(v) for k, v in schema.items() if k not in _DROP_KEYS}
    if schema.get("x-secret"):
        note = "secret: stored, never shown back"
        cleaned["description"] = f"{cleaned.get('description', '')} ({note})".strip()
    return cleaned


def definition_function(definition: SagaDefinition) -> FunctionSpec:
    """The typed start function of one definition."""
    steps = ", ".join(
        f"{s.id} ({s.semantics.value}{', pivot' if s.pivot else ''})" for s in definition.steps
    )
    description = (f"Start the '{definition.name}' saga v{definition.version}: "
                   f"{definition.description} Steps: {steps}. Retrying with the same "
                   "idempotency_key returns the same saga; approvals come from people.")
    return FunctionSpec(
        name=function_name(definition.name),
        description=description.replace("  ", " "),
        parameters={
            "type": "object",
            "properties": {
                "input": _portable(definition.input_json_schema()),
                "idempotency_key": {"type": "string", "minLength": 1,
                                    "maxLength": KEY_CHARS.value,
                                    "description": "your key for this request; a retry with "
                                    "the same key returns the same saga"},
                "reason": {"type": "string", "minLength": 1,
                           "description": "why, in a sentence; recorded in the saga's log"},
                "lineage": lineage_json_schema(),
            },
            "required": ["input", "idempotency_key", "reason"],
            "additionalProperties": False,
        },
    )


def gateway_functions(
    definitions: Sequence[SagaDefinition], mcp_tools: Sequence[McpTool]
) -> list[FunctionSpec]:
    """Every MCP tool as a function, then one typed start function per definition."""
    specs = [FunctionSpec(t.name, t.description or "", _portable(dict(t.input_schema)))
             for t in mcp_tools]
    specs += [definition_function(d) for d in definitions]
    return specs


def export(specs: Sequence[FunctionSpec], fmt: ExportFormat) -> list[dict[str, Any]]:
    """The functions in OpenAI (``type: function``) or Anthropic (``input_schema``) style."""
    if fmt == "openai":
        return [{"type": "function",
                 "function": {"name": s.name, "description": s.description,
                              "parameters": s.parameters}} for s in specs]
    return [{"name": s.name, "description": s.description, "input_schema": s.parameters}
            for s in specs]


class FunctionRouter:
    """Runs a model's function call through the gateway and answers with one JSON document."""

    def __init__(self, service: GatewayService) -> None:
        self.service = service

    def call(self, who: Principal, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The result of the call, or ``{"error": ..., "problems": [...]}``; never raises."""
        try:
            return self._dispatch(who, name, dict(arguments))
        except SagaError as exc:
            return tool_error(exc)

    def _dispatch(self, who: Principal, name: str, args: dict[str, Any]) -> dict[str, Any]:
        service = self.service
        simple: dict[str, Callable[..., dict[str, Any]]] = {
            "list_sagas": service.list_sagas,
            "start_saga": service.start_saga,
            "put_secret": service.put_secret,
            "propose_plan": service.propose_plan,
            "saga_status": service.saga_status,
            "saga_wait": service.saga_wait,
            "saga_audit": service.saga_audit,
            "cancel_saga": service.cancel_saga,
        }
        refused = choosing_arguments(args)
        if refused:
            raise BindingRefused(
                f"the call carries {', '.join(n[:40] for n in refused)}: tenant and actor come "
                f"from the principal the call acts as ({who.name!r} of tenant {who.tenant!r})")
        if name in simple:
            return _checked_call(name, simple[name], who, **args)
        if name.startswith(START_PREFIX):
            for record in service.fleet.definitions.list(tenant=who.tenant):
                if function_name(record.name) == name:
                    return _checked_call(name, service.start_saga, who, record.name, **args)
            raise ArgumentsRejected("this function", [Problem(
                "name", "unknown_function", "no definition this tenant sees has a start "
                "function of that name")])
        raise ArgumentsRejected("this function", [Problem("name", "unknown_function",
                                                          "not an exported function")])


def _checked_call(name: str, operation: Callable[..., dict[str, Any]], *args: Any,
                  **kwargs: Any) -> dict[str, Any]:
    """Call ``operation`` if the arguments fit its signature, else a field-level rejection."""
    try:
        inspect.signature(operation).bind(*args, **kwargs)
    except TypeError as exc:
        raise ArgumentsRejected(name, [Problem("arguments", "wrong_arguments", str(exc))]) from None
    return operation(*args, **kwargs)
