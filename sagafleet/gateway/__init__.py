"""The agent gateway: sagafleet as a tool server for agents (MCP and function calling).

Build it explicitly from a Fleet: ``GatewayService(fleet)``, then
``build_mcp_server(service, caller)`` — ``StartedAs(TokenCache(fleet.principals.authenticate),
token)`` for stdio, ``RequestBearer()`` behind :class:`BearerAuth` for HTTP — or
``gateway_functions(...)`` with a :class:`FunctionRouter` called as a principal.
"""

from application.client import PLAN_NAME_PREFIX as PLAN_PREFIX  # its public name here
from sagafleet.gateway.binding import (
    Caller,
    NoCaller,
    RequestBearer,
    StartedAs,
    TokenCache,
)
from sagafleet.gateway.errors import ArgumentsRejected, BindingRefused, GatewayError, tool_error
from sagafleet.gateway.function_schemas import (
    FunctionRouter,
    FunctionSpec,
    definition_function,
    export,
    gateway_functions,
)
from sagafleet.gateway.http_auth import BearerAuth
from sagafleet.gateway.mcp_server import build_mcp_server
from sagafleet.gateway.service import GatewayService

__all__ = [
    "PLAN_PREFIX",
    "ArgumentsRejected",
    "BearerAuth",
    "BindingRefused",
    "Caller",
    "FunctionRouter",
    "FunctionSpec",
    "GatewayError",
    "GatewayService",
    "NoCaller",
    "RequestBearer",
    "StartedAs",
    "TokenCache",
    "build_mcp_server",
    "definition_function",
    "export",
    "gateway_functions",
    "tool_error",
]
