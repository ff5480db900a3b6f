"""The ``sagafleet`` console command: a thin composition root with no logic of its own.

Each subcommand parses its arguments, builds the objects it needs from the one
:class:`~sagafleet.settings.Settings`, calls into the rooms, and reports.

How it ends, whatever the command: 0 when it did its job; argparse's 2 for a malformed
command line; the named code of a typed error (:mod:`sagafleet.errors`), printed as one
line (or one JSON document with ``--json``), never a traceback; 130 on Ctrl-C, even while
the command is still importing. This module imports only the standard library at its top
so that a Ctrl-C during the (slow) imports of the rooms is already ours to answer.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib import metadata

from sagafleet.exit_codes import ExitCode, describe

EXAMPLES = (
    "examples:\n"
    "  sagafleet demo --sagas 50 --workers 2\n"
    "  sagafleet db migrate\n"
    "  sagafleet db url --show-password\n"
    "  sagafleet start trip --input @trip.json --key order-42\n"
    "  sagafleet list --status MANUAL_INTERVENTION\n"
    "  sagafleet embedded start\n"
    "  sagafleet embedded stop\n"
)


def _version() -> str:
    """The installed distribution's version (a source checkout that was never installed
    says so instead of failing)."""
    try:
        return metadata.version("sagafleet")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def roles() -> str:
    """What each built-in role may do (``saga_core.access.roles.ROLE_ACTIONS``), and the fleet
    role that alone answers for what no tenant owns."""
    from saga_core.access.roles import FLEET_OPERATOR_ROLE, ROLE_ACTIONS

    lines = [f"  {role}: {', '.join(sorted(actions))}" for role, actions in ROLE_ACTIONS.items()]
    return ("roles (sagafleet principals add --role R; every principal acts in its own tenant "
            "only):\n" + "\n".join(lines) + "\n"
            f"  {FLEET_OPERATOR_ROLE} is the platform's role, not a tenant's: it alone sees and "
            "resolves\n  the dead letters no tenant is proven to own (unsigned, forged, "
            "malformed), the\n  console's workers detail and the metrics endpoints (every "
            "tenant's figures).\n")


def epilog() -> str:
    """``--help``'s tail: examples, the roles, every ``SAGAFLEET_*`` variable, every exit
    code."""
    from sagafleet.settings import Settings

    return (EXAMPLES + "\n" + roles() + "\n" + Settings.describe() + "\n\n" + describe())


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from sagafleet import commands

    parser = argparse.ArgumentParser(
        prog="sagafleet",
        description="Saga orchestration for AI agents on an event-sourced worker fleet.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sagafleet {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in commands.REGISTRARS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console command; returns a named exit code."""
    try:
        return _run(argv)
    except KeyboardInterrupt:
        # Ctrl-C: the shell's convention (128 + SIGINT), and no traceback.
        return int(ExitCode.INTERRUPTED)


def _run(argv: Sequence[str] | None) -> int:
    from saga_core.errors import SagaError
    from sagafleet import commands
    from sagafleet.output import emit_error
    from sagafleet.settings import Settings

    parser = build_parser()
    args = parser.parse_args(argv)
    # The embedded PostgreSQL's manager narrates every start at INFO; our users need none of it.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    as_json = bool(getattr(args, "json", False))
    try:
        settings = Settings.from_env()
        return int(args.handler(args, settings))
    except SagaError as exc:
        code = commands.exit_code_for(exc)
        emit_error(str(exc), as_json=as_json, error=type(exc).__name__)
        return int(code)


if __name__ == "__main__":
    sys.exit(main())
