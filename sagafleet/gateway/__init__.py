"""The agent gateway: sagafleet as a tool server for agents (MCP and function calling).

Build it explicitly from a Fleet: ``GatewayService(fleet)``, then
``build_mcp_server(service, BindingPolicy(tenant, actor))`` or ``gateway_functions(...)``.
"""

from sagafleet.gateway.binding import BindingPolicy, CallerBinding
from sagafleet.gateway.errors import ArgumentsRejected, BindingRefused, GatewayError, tool_error
from sagafleet.gateway.function_schemas import (
    FunctionRouter,
    FunctionSpec,
    definition_function,
    export,
    gateway_functions,
)
from sagafleet.gateway.mcp_server import build_mcp_server
from sagafleet.gateway.service import GatewayService
from workers.client import PLAN_NAME_PREFIX as PLAN_PREFIX  # its public name here

__all__ = [
    "PLAN_PREFIX",
    "ArgumentsRejected",
    "BindingPolicy",
    "BindingRefused",
    "CallerBinding",
    "FunctionRouter",
    "FunctionSpec",
    "GatewayError",
    "GatewayService",
    "build_mcp_server",
    "definition_function",
    "export",
    "gateway_functions",
    "tool_error",
]
