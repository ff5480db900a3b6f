"""Who runs a command: the principal proven by the API token the command line was given.

Every command that acts on a tenant's sagas (approve, deny, resolve, cancel, start,
register, dead-letters requeue|discard, secrets put) calls :func:`cli_principal` before it
does anything: the token comes from ``--token-file PATH`` (preferred: a file's content stays
out of ``ps`` and the environment of child processes) or ``SAGAFLEET_TOKEN``. The tenant and
the name events record are the principal's, never something typed; no token, or one the
directory does not know, is ``Unauthenticated`` (exit code 11), and the token is never
printed, not even in part.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Final

from application.principals.directory import PrincipalDirectory
from saga_core.access.roles import Principal, Unauthenticated
from sagafleet.settings import SecretFileUnreadable, Settings, read_secret_file

__all__ = ["TOKEN_FILE_BYTES", "add_token_option", "cli_principal", "token_from"]

TOKEN_FILE_BYTES: Final = 4096
"""Longest token file read (a token is 47 characters; a bigger file is not a token file)."""

NO_TOKEN: Final = ("no API token: pass --token-file PATH or set SAGAFLEET_TOKEN (an admin "
                   "issues one with `sagafleet principals add`)")


def add_token_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--token-file PATH`` to a subcommand that acts as an authenticated principal."""
    parser.add_argument(
        "--token-file", default=None, metavar="PATH",
        help="read the API token from this file (else SAGAFLEET_TOKEN); the command acts "
             "as the token's principal, in its tenant")


def token_from(args: argparse.Namespace | Any, settings: Settings) -> str:
    """The token the command was given: ``--token-file`` first, then ``SAGAFLEET_TOKEN``
    (``Unauthenticated`` when neither is there or the file cannot be read)."""
    path = getattr(args, "token_file", None)
    if path:
        try:
            return read_secret_file(Path(path), TOKEN_FILE_BYTES)
        except SecretFileUnreadable as exc:
            raise Unauthenticated(f"--token-file: {exc}") from None
    if settings.token is not None and settings.token.get_secret_value().strip():
        return settings.token.get_secret_value().strip()
    raise Unauthenticated(NO_TOKEN)


def cli_principal(args: argparse.Namespace | Any, settings: Settings,
                  directory: PrincipalDirectory) -> Principal:
    """The principal the command's token proves, or ``Unauthenticated`` (exit code 11)."""
    return directory.authenticate(token_from(args, settings))
