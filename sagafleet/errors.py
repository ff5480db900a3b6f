"""The command line's own errors, and the exit code of every error kind, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from saga_core.errors import ErrorKind, SagaError
from sagafleet.exit_codes import ExitCode


class InvalidInput(SagaError):
    """A command-line value is malformed (not JSON, not an object); the message names it."""

    kind = ErrorKind.INVALID_INPUT


class NotFound(SagaError):
    """A file named on the command line cannot be read."""

    kind = ErrorKind.NOT_FOUND


class UsageError(SagaError):
    """A command-line option is out of range; the message names it."""

    # Misconfigured is what the operator fixes in how the command is run: exit code USAGE.
    kind = ErrorKind.MISCONFIGURED


EXIT_CODES: Final[Mapping[ErrorKind, ExitCode]] = MappingProxyType({
    ErrorKind.INVALID_INPUT: ExitCode.INVALID_INPUT,
    ErrorKind.NOT_FOUND: ExitCode.NOT_FOUND,
    ErrorKind.CONFLICT: ExitCode.CONFLICT,
    ErrorKind.UNAVAILABLE: ExitCode.UNAVAILABLE,
    # Settings, tool set or schema: the operator fixes how the command is run, like a usage error.
    ErrorKind.MISCONFIGURED: ExitCode.USAGE,
    ErrorKind.INTEGRITY: ExitCode.FAILURE,
    ErrorKind.UNAUTHENTICATED: ExitCode.UNAUTHENTICATED,
    ErrorKind.FORBIDDEN: ExitCode.FORBIDDEN,
    ErrorKind.FAILURE: ExitCode.FAILURE,
})
"""The exit code of every error kind."""


def exit_code_for(error: SagaError) -> ExitCode:
    """The exit code that names what kind of failure ``error`` is."""
    return EXIT_CODES[error.kind]
