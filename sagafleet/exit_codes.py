"""Named exit codes of the ``sagafleet`` command, documented in ``--help``."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a ``sagafleet`` process's exit status means."""

    OK = 0
    FAILURE = 1  # an unexpected error; the message says what
    USAGE = 2  # bad arguments (argparse's own code) or setup: settings, tool set, unmigrated db
    INVALID_INPUT = 3  # input, definition or plan rejected; every problem is printed
    NOT_FOUND = 4  # the saga, definition or step does not exist (for this tenant)
    CONFLICT = 5  # idempotency key reused with other input, stale approval, version race
    UNAVAILABLE = 6  # the database or broker cannot be reached
    VERIFY_FAILED = 7  # verify/audit found a difference or a broken hash chain
    INVARIANT_VIOLATED = 8  # the demo or chaos run found a duplicate effect or a stuck saga
    LOG_TAMPERED = 9  # verify: the log no longer holds what its signed checkpoints anchored
    TIMED_OUT = 10  # wait: the saga was still running (not finished, not paused) at --timeout
    UNAUTHENTICATED = 11  # no valid token (SAGAFLEET_TOKEN, --token-file): unknown or revoked
    FORBIDDEN = 12  # the token's principal may not do this (role, tenant, four eyes)
    INTERRUPTED = 130  # stopped by Ctrl-C (SIGINT), as shells report it


def describe() -> str:
    """A help-text table of the exit codes."""
    return "exit codes:\n" + "\n".join(
        f"  {code.value}  {code.name.lower().replace('_', '-')}" for code in ExitCode
    )
