"""``sagafleet secrets put``: deposit a secret input and print the ref to send instead.

The value is read from stdin (prompted without echo on a terminal) or from a file, never
from the command line, where ``ps``, shell history and CI logs would keep it. What is
printed is the ref, ``{"$secret_ref": "sr_…"}``: an agent puts it in the secret field of
a ``sagafleet.commands.start_saga`` message (or any start), and the first start spends it.
It is deposited for the tenant of the command's token (``--token-file`` or
``SAGAFLEET_TOKEN``), whose principal needs a role that may start sagas.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from application.client import DEFAULT_SECRET_TTL, MAX_SECRET_TTL, MIN_SECRET_TTL
from sagafleet.auth import add_token_option, cli_principal
from sagafleet.errors import InvalidInput, NotFound, UsageError
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import command_fleet
from sagafleet.output import emit
from sagafleet.settings import Settings


def register(sub: Any) -> None:
    """Add the ``secrets`` subcommand."""
    secrets = sub.add_parser("secrets", help="deposit secret inputs (refs for broker commands)")
    actions = secrets.add_subparsers(dest="secrets_command", required=True, metavar="ACTION")
    put = actions.add_parser(
        "put", help="store a secret from stdin or --file; print the single-use ref",
        description="Store a secret input for this tenant and print {\"$secret_ref\": ...} "
        "to send in its field instead of the value. The value comes from stdin (prompted "
        "without echo on a terminal) or --file, never from an argument.",
    )
    put.add_argument("--file", default=None, help="read the value from this file")
    put.add_argument("--format", choices=("text", "json"), default="text",
                     help="text: the value is the text (one trailing newline dropped); "
                          "json: the value is a JSON document")
    put.add_argument("--ttl", type=float, default=DEFAULT_SECRET_TTL.total_seconds(),
                     help="seconds the ref waits for its start (default %(default)g)")
    add_token_option(put)
    put.add_argument("--json", action="store_true", help="print one JSON document")
    put.set_defaults(handler=run_put)


def run_put(args: argparse.Namespace, settings: Settings) -> int:
    """Read the value, deposit it, print the ref."""
    low, high = MIN_SECRET_TTL.total_seconds(), MAX_SECRET_TTL.total_seconds()
    if not low <= args.ttl <= high:
        raise UsageError(f"sagafleet secrets put: --ttl must be from {low:g} to {high:g} seconds")
    fleet = command_fleet(settings)
    try:
        # Proven before the value is asked for: a refused token never sees a secret typed.
        client = fleet.client_for(cli_principal(args, settings, fleet.principals))
        value = _value(_read(args.file), args.format)
        ref = client.put_secret(value, ttl=timedelta(seconds=args.ttl))
    finally:
        fleet.close()
    document = {"secret_ref": ref.as_input(), "expires_at": ref.expires_at.isoformat()}
    emit(document, as_json=args.json, text=lambda d: (
        f"{json.dumps(d['secret_ref'])}\n"
        f"expires at {d['expires_at']}; put it, as it is, in the secret field of one start"))
    return ExitCode.OK


def _read(path: str | None) -> str:
    """The value's text: from ``path``, a no-echo prompt on a terminal, or stdin."""
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise NotFound(f"--file: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"--file: {path} is not UTF-8 text") from None
    if sys.stdin.isatty():
        return getpass.getpass("secret (not echoed): ")
    return sys.stdin.read()


def _value(text: str, fmt: str) -> Any:
    """The secret value of ``text`` (errors never quote it)."""
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"the secret is not JSON (line {exc.lineno}, column "
                               f"{exc.colno}: {exc.msg})") from None
    value = text.removesuffix("\n").removesuffix("\r")
    if not value:
        raise InvalidInput("the secret is empty: give it on stdin or with --file")
    return value
