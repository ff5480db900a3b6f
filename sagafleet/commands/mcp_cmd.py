"""``sagafleet mcp`` and ``sagafleet tools export``: sagafleet as a tool server for agents."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from application.telemetry.logs import configure_logging
from application.telemetry.tracing import init_tracing
from sagafleet import extras
from sagafleet.auth import add_token_option, token_from
from sagafleet.commands.addresses import host_port, plain_http_warning
from sagafleet.errors import UsageError
from sagafleet.example_sagas.registration import register_trip
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import build_fleet, command_fleet
from sagafleet.output import emit
from sagafleet.security_log import configure_access_log
from sagafleet.settings import Settings

if TYPE_CHECKING:
    from sagafleet.gateway import TokenCache

MCP_EPILOG = """examples:
  SAGAFLEET_TOKEN=... sagafleet mcp               # stdio, as the token's principal
  sagafleet mcp --token-file ~/.sagafleet-token   # the same, the token read from a file
  sagafleet mcp --http 127.0.0.1:8765             # streamable HTTP at /mcp

Every call acts as a principal proven by a token (`sagafleet principals add` issues one):
over stdio the token the server is started with (none, unknown or revoked: exit 11);
over HTTP each request's `Authorization: Bearer <token>` (none, unknown or revoked: 401).
Tenant and actor are the principal's; its roles decide what it may call (a missing role is
a FORBIDDEN tool error). A revoked token stops working within 5 seconds.
A tool call with a tenant or actor argument is refused, as are the X-Sagafleet-Tenant and
X-Sagafleet-Actor headers. Refusals (401, a refused binding, a forbidden call) are logged as
one JSON line each on the sagafleet.security logger (stderr; never a token);
SAGAFLEET_ACCESS_LOG=true adds one line per HTTP request on sagafleet.access. --http serves
plain http: on an address other machines can reach it warns at start (bearer tokens would
cross the network in clear); put a TLS proxy in front.
Tools: list_sagas, start_saga, put_secret, propose_plan, saga_status, saga_wait,
saga_audit, cancel_saga. Approving is not a tool: people approve with `sagafleet approve`."""


def register(sub: Any) -> None:
    """Add the ``mcp`` and ``tools`` subcommands."""
    mcp = sub.add_parser(
        "mcp", help="serve the saga tools over MCP (stdio, or streamable HTTP)",
        description="An MCP server exposing sagafleet's saga tools to agents; every call "
        "acts as the principal of a token, with its tenant, name and roles.",
        epilog=MCP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    mcp.add_argument("--http", metavar="HOST:PORT", default=None,
                     help="serve streamable HTTP on HOST:PORT instead of stdio")
    mcp.add_argument("--path", default="/mcp", help="HTTP path of the endpoint (default /mcp)")
    add_token_option(mcp)
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


def run_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP).

    stdio refuses to start without a token its directory proves (Unauthenticated, exit 11).
    A long-running service: its fleet migrates the schema at start-up."""
    # Imported here so the other commands do not pay for loading the MCP SDK (an extra).
    extras.require("mcp", feature="sagafleet mcp (the agent gateway)", extra=extras.MCP)
    from sagafleet.gateway import (
        GatewayService,
        RequestBearer,
        StartedAs,
        TokenCache,
        build_mcp_server,
    )

    address = host_port(args.http, "sagafleet mcp") if args.http else None
    if address is not None and args.token_file is not None:
        raise UsageError("sagafleet mcp: --token-file is for stdio; over --http every request "
                         "sends its own Authorization: Bearer <token>")
    # Checked before the fleet is built: without a token nothing is started at all.
    token = None if address is not None else token_from(args, settings)
    # Before the SDK's server is built: its own logging set-up then finds ours and stays out.
    configure_logging(logging.WARNING, settings.log_format)  # stderr: stdout is the protocol
    configure_access_log(settings.access_log)
    init_tracing(settings.otel, "mcp")  # each saga an agent starts is a trace
    fleet = build_fleet(settings)
    try:
        tokens = TokenCache(fleet.principals.authenticate)
        caller: StartedAs | RequestBearer
        if token is not None:
            tokens.authenticate(token)  # unknown or revoked: refuse to start (exit 11)
            caller = StartedAs(tokens, token)
        else:
            caller = RequestBearer()
        # The example trip, only where this fleet can run its tools (the sandbox's; a
        # command line with no tool set checks against the example catalogue).
        register_trip(fleet)
        server = build_mcp_server(GatewayService(fleet), caller)
        if address is None:
            server.run()
        else:
            serve_http(server, address, args.path, tokens)
    finally:
        fleet.close()
    return ExitCode.OK


def serve_http(server: Any, address: tuple[str, int], path: str, tokens: TokenCache) -> None:
    """Serve streamable HTTP: every request proves a bearer token first (``BearerAuth``),
    then has its body capped (``mcp_body_bytes``); refusals go to the security log, and
    every request to the access log when it is on (``RequestLog``, outermost)."""
    import uvicorn

    from saga_core.limits import MCP_BODY_BYTES
    from sagafleet.gateway import BearerAuth
    from sagafleet.gateway.http_body import BodyLimit
    from sagafleet.security_log import RequestLog

    app = server.streamable_http_app(streamable_http_path=path, host=address[0],
                                     max_request_body_size=MCP_BODY_BYTES.value)
    warning = plain_http_warning("sagafleet mcp", address[0], address[1],
                                 "the agents' bearer tokens")
    if warning:
        print(warning, file=sys.stderr, flush=True)
    uvicorn.run(RequestLog(BearerAuth(BodyLimit(app), tokens)), host=address[0],
                port=address[1], log_level="warning")


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    """Print the function-calling schemas of the registered definitions and the tools."""
    extras.require("mcp", feature="sagafleet tools export", extra=extras.MCP)
    import anyio

    from sagafleet.gateway import (
        GatewayService,
        NoCaller,
        build_mcp_server,
        export,
        gateway_functions,
    )

    fleet = command_fleet(settings)
    try:
        # The example trip, only where this fleet can run its tools (the sandbox's; a
        # command line with no tool set checks against the example catalogue).
        register_trip(fleet)
        service = GatewayService(fleet)
        # Only the tool list is read: this server acts for nobody, so it needs no token; the
        # definitions exported are the configured tenant's and the shared set.
        server = build_mcp_server(service, NoCaller())
        specs = gateway_functions(service.registered_definitions(settings.tenant),
                                  anyio.run(server.list_tools))
    finally:
        fleet.close()
    emit(export(specs, args.format), as_json=args.json,
         text=lambda _: "\n".join(f"{s.name}: {s.description.splitlines()[0]}" for s in specs))
    return ExitCode.OK
