"""The MCP server: sagafleet's saga operations as tools, over stdio or streamable HTTP.

Built explicitly from a :class:`GatewayService` and a :class:`~sagafleet.gateway.binding.Caller`
(no globals). Every tool first finds the proven principal it acts as (the stdio server's
start token, or the HTTP request's bearer token), whose tenant and name bind the call and
whose roles the service checks; it answers with one JSON document: the result, or a
structured error (``isError``) naming each field and rule. Approving is not a tool:
approvals come from people through the operator commands.

Before the SDK sees a call, :class:`GatewayServer` refuses a ``tenant`` or ``actor``
argument (:class:`~sagafleet.gateway.errors.BindingRefused`, as the HTTP headers are), and
arguments that do not fit a tool's signature come back as
:class:`~sagafleet.gateway.errors.ArgumentsRejected` naming each field and rule (the SDK's
own message would quote the values). A refused binding, a forbidden call and an
unauthenticated one each write a line to the security log (:mod:`sagafleet.security_log`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from saga_core.access.roles import Principal
from saga_core.agents.lineage import lineage_json_schema
from saga_core.agents.plans import PlannedAction
from saga_core.errors import SagaError
from sagafleet.gateway.binding import Caller, choosing_arguments
from sagafleet.gateway.errors import ArgumentsRejected, BindingRefused, problems_of, tool_error
from sagafleet.gateway.service import GatewayService
from sagafleet.security_log import EVENT_OF_KIND, SecurityEvent, client_address, record

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "sagafleet runs multi-step, side-effecting workflows (sagas) under a deterministic "
    "orchestrator. Call list_sagas to see what can be started and what each step does; "
    "start_saga with an idempotency key (retrying with the same key is always safe); follow "
    "it with saga_status, or saga_wait until it finishes or needs a person. A secret input "
    "field (a card token) takes the value, or a ref from put_secret, which is the only way "
    "a secret may travel in a Celery command. "
    "To run your own sequence of allowlisted tools, propose_plan first. "
    "Every call acts as the principal of your token, in its tenant and under its name; a "
    "forbidden error means its roles do not allow that call. "
    "Approvals are given by people, never by agents."
)

LINEAGE_SCHEMA = lineage_json_schema()
SagaId = Annotated[str, Field(description="the saga id returned by start_saga")]
Reason = Annotated[str, Field(description="why, in a sentence; recorded in the saga's log")]


def _reply(report: dict[str, Any], *, error: bool = False) -> CallToolResult:
    text = json.dumps(report, ensure_ascii=False, sort_keys=True, default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=report, is_error=error)


class _Tools:
    """The tool functions, bound to one service and to how a call finds its principal."""

    def __init__(self, service: GatewayService, caller: Caller) -> None:
        self.service = service
        self.caller = caller

    def _call(self, ctx: Context, tool: str, operation: Callable[[Principal], dict[str, Any]],
              ) -> CallToolResult:
        who: Principal | None = None
        try:
            who = self.caller.principal(_request(ctx))
            return _reply(operation(who))
        except SagaError as exc:
            if exc.kind in EVENT_OF_KIND:  # a refusal: a line of the security log
                _record(EVENT_OF_KIND[exc.kind], str(exc), tool, who, _request(ctx))
            return _reply(tool_error(exc), error=True)
        except Exception as exc:
            # Never a traceback to the agent; the server log keeps it.
            log.exception("tool call failed")
            return _reply(tool_error(exc), error=True)

    def list_sagas(self, ctx: Context) -> CallToolResult:
        """The saga definitions you can start: description, each step's semantics (compensable,
        pivot, approval) and the JSON Schema of the input."""
        return self._call(ctx, "list_sagas", self.service.list_sagas)

    def start_saga(  # noqa: PLR0917 -- an MCP tool: its parameters are the tool's arguments
        self,
        definition: Annotated[str, Field(description="definition name from list_sagas")],
        input: Annotated[dict[str, Any], Field(description="the input, matching the "
                                               "definition's input_schema")],
        idempotency_key: Annotated[str, Field(description="your key for this request; a retry "
                                              "with the same key returns the same saga")],
        reason: Reason,
        *,
        ctx: Context,
        lineage: Annotated[dict[str, Any] | None, Field(
            description=LINEAGE_SCHEMA["description"],
            json_schema_extra={"properties": LINEAGE_SCHEMA["properties"],
                               "additionalProperties": False})] = None,
        dry_run: Annotated[bool, Field(description="true: only show what the start would do "
                                       "(steps, arguments, keys, approvals, compensations); "
                                       "nothing is started")] = False,
    ) -> CallToolResult:
        """Start a saga (validated against its input schema); says what will happen and what
        may need a human."""
        return self._call(ctx, "start_saga", lambda who: self.service.start_saga(
            who, definition, input, idempotency_key, reason, lineage=lineage,
            dry_run=dry_run))

    def put_secret(
        self,
        value: Annotated[Any, Field(description="the secret value (a card token, a "
                                    "password, ...), as the secret input field expects it")],
        ctx: Context,
        ttl_seconds: Annotated[float, Field(description="seconds it waits for its start "
                                            "(1 to 86400)")] = 900.0,
    ) -> CallToolResult:
        """Store a secret input and get a single-use ref to send instead of the value: the
        ref, not the secret, then travels in start_saga or a Celery command. It expires
        unused after ttl_seconds; the value is never shown back."""
        return self._call(ctx, "put_secret",
                          lambda who: self.service.put_secret(who, value, ttl_seconds))

    def propose_plan(
        self,
        steps: Annotated[list[dict[str, Any]], Field(
            description="ordered actions; semantics and compensations come from the tool "
            "catalogue, not from you; without depends_on an action follows the previous one",
            # Advertised precisely, accepted loosely: the gateway validates each action itself
            # so that every problem comes back at once, with its field and rule.
            json_schema_extra={"items": PlannedAction.model_json_schema()})],
        *,
        ctx: Context,
        goal: Annotated[str, Field(description="what the plan is for")] = "",
        dry_run: Annotated[bool, Field(description="true: register nothing; show what "
                                       "starting the plan with input would do")] = False,
        input: Annotated[dict[str, Any] | None, Field(
            description="with dry_run: the input the start would get")] = None,
        revises: Annotated[str | None, Field(
            description="to replan a running saga started from your plan: its saga id. The "
            "plan becomes its next version; actions already run are kept, not repeated; "
            "actions you leave out are undone")] = None,
        reason: Annotated[str, Field(description="why you replan, for the saga's log")] = "",
    ) -> CallToolResult:
        """Validate a plan of allowlisted tool calls; returns every problem at once, or the
        definition name to start it with start_saga. With revises: replans that saga."""
        return self._call(ctx, "propose_plan", lambda who: self.service.propose_plan(
            who, steps, goal, revises, reason, dry_run=dry_run, input=input))

    def saga_status(self, saga_id: SagaId, ctx: Context) -> CallToolResult:
        """A saga's state, steps, receipts and what it is waiting for."""
        return self._call(ctx, "saga_status", lambda who: self.service.saga_status(who, saga_id))

    def saga_wait(
        self,
        saga_id: SagaId,
        ctx: Context,
        timeout_seconds: Annotated[float, Field(description="longest to wait, in seconds "
                                                "(0 to 60)")] = 30.0,
    ) -> CallToolResult:
        """Wait until a saga is finished or waits for a person (an approval, an operator),
        at most timeout_seconds; returns its status and settled (false: still running, call
        again). Cheaper and quicker than calling saga_status in a loop."""
        return self._call(ctx, "saga_wait", lambda who: self.service.saga_wait(who, saga_id,
                                                                  timeout_seconds))

    def saga_audit(self, saga_id: SagaId, ctx: Context) -> CallToolResult:
        """A saga's timeline of events from the log, with who recorded each (secrets hidden)."""
        return self._call(ctx, "saga_audit", lambda who: self.service.saga_audit(who, saga_id))

    def cancel_saga(self, saga_id: SagaId, reason: Reason, ctx: Context) -> CallToolResult:
        """Ask to cancel a saga: what can still be undone is compensated (never past the
        pivot)."""
        return self._call(ctx, "cancel_saga",
                          lambda who: self.service.cancel_saga(who, saga_id, reason))


class GatewayServer(MCPServer):
    """The SDK's server, with the gateway's own word on a call's arguments: a ``tenant`` or
    ``actor`` argument is refused, and arguments that do not fit are named field by field
    without their values."""

    def __init__(self, tools: _Tools) -> None:
        super().__init__("sagafleet", instructions=INSTRUCTIONS, log_level="WARNING")
        self._tools = tools

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context | None = None) -> Any:
        """Refuse a choosing argument, then call the tool; a ``ValidationError`` of its
        arguments becomes :class:`ArgumentsRejected` (never the SDK's text, which quotes
        every value)."""
        request = _request(context) if context is not None else None
        refused = choosing_arguments(arguments)
        if refused:
            return self._refuse_binding(name, refused, request)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            return _reply(tool_error(ArgumentsRejected(name, problems_of(cause))), error=True)

    def _refuse_binding(self, tool: str, refused: list[str], request: Any) -> CallToolResult:
        try:
            who: Principal | None = self._tools.caller.principal(request)
        except SagaError:  # unproven: the refusal is the same, the log names nobody
            who = None
        named = ", ".join(name[:40] for name in refused)
        acting = (f" (this one acts as {who.name!r} of tenant {who.tenant!r})"
                  if who is not None else "")
        _record("binding_refused", f"the call carries the argument {named}", tool, who,
                request)
        return _reply(tool_error(BindingRefused(
            f"the call carries {named}: tenant and actor come from the token{acting}; call "
            f"{tool} without them")), error=True)


def _record(event: str, reason: str, tool: str, who: Principal | None, request: Any) -> None:
    """A security-log line for a refused tool call (the client's address over HTTP)."""
    scope = getattr(request, "scope", None)
    record(SecurityEvent(
        event, reason, client=client_address(scope) if isinstance(scope, dict) else None,
        tenant=who.tenant if who else None, principal=who.name if who else None,
        tool=tool[:80]))


def _request(ctx: Context) -> Any | None:
    """The transport's request of the current call (the Starlette request over HTTP; None
    on stdio)."""
    try:
        return ctx.request_context.request
    except ValueError:  # outside a request (direct in-process calls)
        return None


def build_mcp_server(service: GatewayService, caller: Caller) -> MCPServer:
    """An MCP server exposing the gateway's tools, every call acting as ``caller``'s principal.

    Agents get no approve, deny or resolve tool: those are people's, through the operator
    commands with their own tokens."""
    tools = _Tools(service, caller)
    server = GatewayServer(tools)
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
    writes = ToolAnnotations(idempotent_hint=True, destructive_hint=False)
    for fn, hints in (
        (tools.list_sagas, read_only),
        (tools.start_saga, writes),
        (tools.put_secret, ToolAnnotations(idempotent_hint=False, destructive_hint=False)),
        (tools.propose_plan, writes),
        (tools.saga_status, read_only),
        (tools.saga_wait, read_only),
        (tools.saga_audit, read_only),
        (tools.cancel_saga, ToolAnnotations(idempotent_hint=True, destructive_hint=True)),
    ):
        description = " ".join((fn.__doc__ or "").split())
        server.add_tool(fn, name=fn.__name__, description=description, annotations=hints)
    return server
