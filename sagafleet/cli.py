"""The ``sagafleet`` console command: a thin composition root with no logic of its own.

Each subcommand parses its arguments, builds the objects it needs from the one
:class:`~sagafleet.settings.Settings`, calls into the rooms, and reports.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from saga_core.errors import SagaError
from sagafleet import commands
from sagafleet.exit_codes import ExitCode, describe
from sagafleet.output import emit_error
from sagafleet.settings import Settings

EPILOG = (
    "examples:\n"
    "  sagafleet demo --sagas 50 --workers 2\n"
    "  sagafleet db migrate\n"
    "  sagafleet db url --show-password\n"
    "  sagafleet embedded stop\n\n" + Settings.describe() + "\n\n" + describe()
)


def _version() -> str:
    """The installed distribution's version (a source checkout that was never installed
    says so instead of failing)."""
    try:
        return metadata.version("sagafleet")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="sagafleet",
        description="Saga orchestration for AI agents on an event-sourced worker fleet.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sagafleet {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in commands.REGISTRARS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console command; returns a named exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # The embedded PostgreSQL's manager narrates every start at INFO; our users need none of it.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    as_json = bool(getattr(args, "json", False))
    handler: Callable[[argparse.Namespace, Settings], int] = args.handler
    try:
        settings = Settings.from_env()
        return int(handler(args, settings))
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except SagaError as exc:
        code = commands.exit_code_for(exc)
        emit_error(str(exc), as_json=as_json, error=type(exc).__name__)
        return int(code)


if __name__ == "__main__":
    sys.exit(main())
