"""``sagafleet console``: the operator console, a web page for people (sagafleet.console)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from application.telemetry.logs import configure_logging
from sagafleet.commands.addresses import host_port, plain_http_warning
from sagafleet.errors import UsageError
from sagafleet.exit_codes import ExitCode
from sagafleet.security_log import configure_access_log
from sagafleet.settings import Settings

DEFAULT_ADDRESS = "127.0.0.1:8080"

EPILOG = """examples:
  sagafleet console                                  # http://127.0.0.1:8080, sign in there
  sagafleet console --http 0.0.0.0:8443 --tls-cert cert.pem --tls-key key.pem
  sagafleet console --http 127.0.0.1:8080 --forwarded-allow-ips 127.0.0.1   # behind a proxy

Sign in with a principal's API token (`sagafleet principals add` issues one; `sagafleet demo
--keep-servers` prints its approver's). The console shows only that principal's tenant, and
every action is checked against its roles on the server. The session cookie is HttpOnly,
SameSite=Strict, and Secure when the console is reached over https (--tls-cert, or a proxy
whose X-Forwarded-Proto: https is trusted through --forwarded-allow-ips). Sessions end after
SAGAFLEET_CONSOLE_SESSION_IDLE_SECONDS without a request and SAGAFLEET_CONSOLE_SESSION_MAX_
SECONDS after sign-in. Served over plain http on an address other machines can reach, it says
so at start (tokens and cookies would cross the network in clear); over https every answer
carries Strict-Transport-Security.

Refused sign-ins, CSRF refusals, every 401 and 403 and every throttled request are logged as
one JSON line each on the sagafleet.security logger (never a token); SAGAFLEET_ACCESS_LOG=true
adds one line per request on sagafleet.access. Failed sign-ins slow later ones of the same
address or token prefix (SAGAFLEET_CONSOLE_SIGNIN_*); live streams are bounded per session,
principal, tenant and process (SAGAFLEET_CONSOLE_LIVE_STREAMS*).

The pages read the projections; the console runs the projector itself (standing by while
`sagafleet projector` runs elsewhere) unless --no-projector is given."""


def register(sub: Any) -> None:
    """Add the ``console`` subcommand."""
    console = sub.add_parser(
        "console", help="serve the operator console (web pages: queue, sagas, health)",
        description="The operator console: people sign in with a principal's API token to "
        "watch sagas and approve, deny, resolve or cancel them.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    console.add_argument("--http", metavar="HOST:PORT", default=DEFAULT_ADDRESS,
                         help=f"where to listen (default {DEFAULT_ADDRESS})")
    console.add_argument("--tls-cert", metavar="PATH", default=None,
                         help="serve https with this certificate (PEM; with --tls-key)")
    console.add_argument("--tls-key", metavar="PATH", default=None,
                         help="the certificate's private key (PEM)")
    console.add_argument("--forwarded-allow-ips", metavar="IPS", default=None,
                         help="trust X-Forwarded-Proto/-For from these proxy addresses "
                         "(comma-separated): behind a TLS proxy, cookies are then Secure")
    console.add_argument("--no-projector", action="store_true",
                         help="do not run the projector in this process (one runs elsewhere)")
    console.set_defaults(handler=run_console)


def run_console(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the console until interrupted (a long-running service: migrates at start-up)."""
    import uvicorn

    from sagafleet.console.app import create_app
    from sagafleet.console.service import open_console

    host, port = host_port(args.http, "sagafleet console")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("sagafleet console: --tls-cert and --tls-key go together")
    configure_logging(logging.INFO, settings.log_format)
    configure_access_log(settings.access_log)
    running = open_console(settings, run_projector=not args.no_projector)
    try:
        scheme = "https" if args.tls_cert else "http"
        sso = running.console.sso
        also = f" or through {sso.settings.provider_name}" if sso is not None else ""
        print(f"sagafleet console: {scheme}://{host}:{port}/ (sign in with an API token"
              f"{also})", flush=True)
        warning = None if args.tls_cert else plain_http_warning(
            "sagafleet console", host, port, "the API tokens people sign in with and their "
            "session cookies")
        if warning:
            print(warning, file=sys.stderr, flush=True)
        options: dict[str, Any] = {"host": host, "port": port, "log_level": "warning",
                                   "ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key}
        if args.forwarded_allow_ips:
            options |= {"proxy_headers": True,
                        "forwarded_allow_ips": args.forwarded_allow_ips}
        else:  # never believe a client's X-Forwarded-Proto about being https
            options |= {"proxy_headers": False}
        uvicorn.run(create_app(running.console), **options)
    finally:
        running.close()
    return ExitCode.OK
