"""Map an error's kind to the command's named exit code, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from saga_core.errors import ErrorKind, SagaError
from sagafleet.exit_codes import ExitCode

EXIT_CODES: Final[Mapping[ErrorKind, ExitCode]] = MappingProxyType({
    ErrorKind.INVALID_INPUT: ExitCode.INVALID_INPUT,
    ErrorKind.NOT_FOUND: ExitCode.NOT_FOUND,
    ErrorKind.CONFLICT: ExitCode.CONFLICT,
    ErrorKind.UNAVAILABLE: ExitCode.UNAVAILABLE,
    # Settings, tool set or schema: the operator fixes how the command is run, like a usage error.
    ErrorKind.MISCONFIGURED: ExitCode.USAGE,
    ErrorKind.INTEGRITY: ExitCode.FAILURE,
    ErrorKind.FAILURE: ExitCode.FAILURE,
})
"""The exit code of every error kind."""


def exit_code_for(error: SagaError) -> ExitCode:
    """The exit code that names what kind of failure ``error`` is."""
    return EXIT_CODES[error.kind]
