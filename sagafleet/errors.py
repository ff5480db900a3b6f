"""Map the rooms' typed errors to the command's named exit codes, in one place."""

from __future__ import annotations

from saga_core.errors import SagaError
from sagafleet.embedded import EmbeddedServerError
from sagafleet.exit_codes import ExitCode
from sagafleet.settings import ConfigurationError

# Matched by class name so this module needs no import of every room's error module;
# the most specific names first.
_BY_NAME: dict[str, ExitCode] = {
    "ConcurrencyError": ExitCode.CONFLICT,
    "DefinitionConflict": ExitCode.CONFLICT,
    "ToolSetError": ExitCode.USAGE,
    "EventIdConflict": ExitCode.CONFLICT,
    "KeyReuseError": ExitCode.CONFLICT,
    "IdempotencyConflict": ExitCode.CONFLICT,
    "InvalidRequest": ExitCode.INVALID_INPUT,
    "InputValidationError": ExitCode.INVALID_INPUT,
    "MalformedMessage": ExitCode.INVALID_INPUT,
    "ApprovalError": ExitCode.CONFLICT,
    "SagaNotFound": ExitCode.NOT_FOUND,
    "DefinitionNotFound": ExitCode.NOT_FOUND,
    "StoreUnavailable": ExitCode.UNAVAILABLE,
    "BrokerUnavailable": ExitCode.UNAVAILABLE,
    "ProblemsError": ExitCode.INVALID_INPUT,
    "InvalidEvent": ExitCode.INVALID_INPUT,
}


def exit_code_for(error: SagaError) -> ExitCode:
    """The exit code that names what kind of failure ``error`` is."""
    if isinstance(error, EmbeddedServerError):
        return ExitCode.UNAVAILABLE
    if isinstance(error, ConfigurationError):
        return ExitCode.USAGE
    for cls in type(error).__mro__:
        code = _BY_NAME.get(cls.__name__)
        if code is not None:
            return code
    return ExitCode.FAILURE
