"""Every error names its kind as data; the CLI maps kinds to exit codes, the gateway to hints."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

from application.client import IdempotencyConflict, InvalidRequest
from events import ConcurrencyError, StoreUnavailable, UnknownEventType
from events.definition_store.port import DefinitionConflict, DefinitionNotFound
from events.saga_log.streams import SagaNotFound
from projections import UnknownProjection
from saga_core.errors import (
    ApprovalNotPending,
    ErrorKind,
    InputValidationError,
    NothingToResolve,
    PlanRejected,
    Problem,
    SagaError,
)
from sagafleet.embedded import EmbeddedServerError
from sagafleet.errors import EXIT_CODES, InvalidInput, NotFound, UsageError, exit_code_for
from sagafleet.exit_codes import ExitCode
from sagafleet.gateway.errors import HINTS, ArgumentsRejected, BindingRefused, tool_error
from sagafleet.settings import ConfigurationError
from workers.tools import ToolSetError

ROOMS = ("saga_core", "events", "workers", "projections", "sagafleet")


def every_module() -> Iterator[str]:
    """Every module of the installed rooms (``__main__`` would run the command)."""
    for room in ROOMS:
        package = importlib.import_module(room)
        yield room
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{room}."):
            if not info.name.endswith("__main__"):
                yield info.name


def every_error_class() -> set[type[SagaError]]:
    """SagaError and all its subclasses, after importing every module that may define one."""
    for name in every_module():
        importlib.import_module(name)
    found: set[type[SagaError]] = set()
    pending: list[type[SagaError]] = [SagaError]
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.add(cls)
            pending.extend(cls.__subclasses__())
    return found


def test_every_error_class_has_a_kind_with_an_exit_code_and_a_hint() -> None:
    # given every SagaError subclass in the tree
    classes = every_error_class()
    assert len(classes) > 40  # the walk found the rooms' errors, not just the root
    for cls in classes:
        # then its kind (its own or inherited) is an ErrorKind the CLI and the gateway know
        assert isinstance(cls.kind, ErrorKind), cls
        assert cls.kind in EXIT_CODES and cls.kind in HINTS, cls
        assert cls.hint is None or cls.hint.strip(), cls


def test_every_kind_has_an_exit_code_and_a_hint() -> None:
    assert set(EXIT_CODES) == set(ErrorKind) == set(HINTS)


@pytest.mark.parametrize(("error", "code"), [
    (InputValidationError("trip", [Problem("input.nights", "missing", "required")]),
     ExitCode.INVALID_INPUT),
    (InvalidRequest("step id must be a string"), ExitCode.INVALID_INPUT),
    (SagaNotFound("no saga 'x'"), ExitCode.NOT_FOUND),
    (DefinitionNotFound("no definition 'x'"), ExitCode.NOT_FOUND),
    (UnknownProjection("no projection 'x'"), ExitCode.NOT_FOUND),
    (ApprovalNotPending("capture_payment", "forward", "no approval was requested"),
     ExitCode.CONFLICT),
    (ConcurrencyError("saga-1", 3, 4), ExitCode.CONFLICT),
    (DefinitionConflict("trip v1 differs"), ExitCode.CONFLICT),
    (IdempotencyConflict("key k started another saga"), ExitCode.CONFLICT),
    (NothingToResolve("s-1", "COMPLETED"), ExitCode.CONFLICT),
    (StoreUnavailable("connection refused"), ExitCode.UNAVAILABLE),
    (EmbeddedServerError("pgserver did not start"), ExitCode.UNAVAILABLE),
    (ConfigurationError("SAGAFLEET_LEASE_SECONDS is invalid"), ExitCode.USAGE),
    (ToolSetError("no tool set"), ExitCode.USAGE),
    (UnknownEventType("NoSuchEvent"), ExitCode.FAILURE),
    (SagaError("anything else"), ExitCode.FAILURE),
    (InvalidInput("--input is not JSON"), ExitCode.INVALID_INPUT),
    (NotFound("cannot read trip.yaml"), ExitCode.NOT_FOUND),
    (UsageError("--workers must be at least 1"), ExitCode.USAGE),
])
def test_the_command_line_exits_with_the_code_of_the_errors_kind(
    error: SagaError, code: ExitCode
) -> None:
    assert exit_code_for(error) is code


def test_the_gateway_hints_by_kind_unless_the_class_says_more() -> None:
    # a class with its own hint keeps it
    plan = tool_error(PlanRejected([Problem("action 0", "unknown_tool", "x")]))
    assert plan["hint"] == PlanRejected.hint and plan["kind"] == "invalid_input"
    arguments = tool_error(ArgumentsRejected("start_trip", [Problem("nights", "type", "int")]))
    assert arguments["hint"] == "fix the named arguments and call again"
    assert tool_error(BindingRefused("no tenant"))["hint"] == BindingRefused.hint
    # the others get their kind's hint
    missing = tool_error(SagaNotFound("no saga 'x'"))
    assert missing["kind"] == "not_found" and "other tenants are not visible" in missing["hint"]
    down = tool_error(StoreUnavailable("connection refused"))
    assert down["hint"] == HINTS[ErrorKind.UNAVAILABLE] and "retry later" in down["hint"]
    conflict = tool_error(IdempotencyConflict("key k started another saga"))
    assert conflict["kind"] == "conflict" and "new idempotency key" in conflict["hint"]
