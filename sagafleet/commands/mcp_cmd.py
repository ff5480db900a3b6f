"""``sagafleet mcp`` and ``sagafleet tools export``: sagafleet as a tool server for agents."""

from __future__ import annotations

import argparse
from typing import Any

from sagafleet.errors import UsageError
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import build_fleet, command_fleet
from sagafleet.output import emit
from sagafleet.settings import Settings

MCP_EPILOG = """examples:
  sagafleet mcp                                   # stdio, for a local agent
  sagafleet mcp --tenant acme --actor planner-bot
  sagafleet mcp --http 127.0.0.1:8765             # streamable HTTP at /mcp
  sagafleet mcp --http 0.0.0.0:8765 --trust-headers   # behind an authenticating proxy

Tools: list_sagas, start_saga, propose_plan, saga_status, saga_audit, cancel_saga.
Approving is not a tool: people approve with `sagafleet approve`.
With --trust-headers, X-Sagafleet-Tenant / X-Sagafleet-Actor choose tenant and actor per
request; without it a header asking for another tenant is refused."""


def register(sub: Any) -> None:
    """Add the ``mcp`` and ``tools`` subcommands."""
    mcp = sub.add_parser(
        "mcp", help="serve the saga tools over MCP (stdio, or streamable HTTP)",
        description="An MCP server exposing sagafleet's saga tools to agents; every call is "
        "bound to one tenant and actor.",
        epilog=MCP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    mcp.add_argument("--http", metavar="HOST:PORT", default=None,
                     help="serve streamable HTTP on HOST:PORT instead of stdio")
    mcp.add_argument("--path", default="/mcp", help="HTTP path of the endpoint (default /mcp)")
    mcp.add_argument("--tenant", default=None, help="act for this tenant (SAGAFLEET_TENANT)")
    mcp.add_argument("--actor", default="agent",
                     help="the actor recorded on every command (default agent)")
    mcp.add_argument("--trust-headers", action="store_true",
                     help="take tenant and actor from X-Sagafleet-* HTTP headers")
    mcp.set_defaults(handler=run_mcp)

    tools = sub.add_parser("tools", help="function-calling schemas of the saga tools")
    tools_sub = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    exp = tools_sub.add_parser(
        "export", help="print OpenAI- or Anthropic-style tool schemas",
        description="Every MCP tool, plus one typed start_<definition> function per "
        "registered definition. Without --json: one line per function.")
    exp.add_argument("--format", choices=("openai", "anthropic"), default="openai")
    exp.add_argument("--json", action="store_true", help="print the schemas as one JSON array")
    exp.set_defaults(handler=run_export)


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"sagafleet mcp: --http wants HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port)


def run_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP).

    A long-running service: its fleet migrates the schema at start-up."""
    # Imported here so the other commands do not pay for loading the MCP SDK.
    from sagafleet.gateway import BindingPolicy, GatewayService, build_mcp_server

    address = _host_port(args.http) if args.http else None
    policy = BindingPolicy(tenant=args.tenant or settings.tenant, actor=args.actor,
                           trust_headers=args.trust_headers)
    fleet = build_fleet(settings)
    try:
        fleet.register_builtin_definitions()
        server = build_mcp_server(GatewayService(fleet), policy)
        if address is None:
            server.run()
        else:
            serve_http(server, address, args.path)
    finally:
        fleet.close()
    return ExitCode.OK


def serve_http(server: Any, address: tuple[str, int], path: str) -> None:
    """Serve streamable HTTP with every request body capped (``mcp_body_bytes``)."""
    import uvicorn

    from saga_core.limits import MCP_BODY_BYTES
    from sagafleet.gateway.http_body import BodyLimit

    app = server.streamable_http_app(streamable_http_path=path, host=address[0],
                                     max_request_body_size=MCP_BODY_BYTES.value)
    uvicorn.run(BodyLimit(app), host=address[0], port=address[1], log_level="warning")


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    """Print the function-calling schemas of the registered definitions and the tools."""
    import anyio

    from sagafleet.gateway import (
        BindingPolicy,
        GatewayService,
        build_mcp_server,
        export,
        gateway_functions,
    )

    fleet = command_fleet(settings)
    try:
        fleet.register_builtin_definitions()
        service = GatewayService(fleet)
        # Only the tool list is read; no call is ever bound with this placeholder policy.
        server = build_mcp_server(service, BindingPolicy(tenant=settings.tenant, actor="export"))
        specs = gateway_functions(service.registered_definitions(settings.tenant),
                                  anyio.run(server.list_tools))
    finally:
        fleet.close()
    emit(export(specs, args.format), as_json=args.json,
         text=lambda _: "\n".join(f"{s.name}: {s.description.splitlines()[0]}" for s in specs))
    return ExitCode.OK
