"""The one rule for agent commands: which failures are retried, which are dead-lettered."""

from __future__ import annotations

import psycopg
import pytest
import redis.exceptions
from kombu.exceptions import OperationalError as KombuOperationalError

from application.client import IdempotencyConflict
from application.messages import MalformedMessage
from application.orchestrator import RaceLost
from events import StoreUnavailable
from events.errors import EventStoreError
from events.saga_log.streams import SagaNotFound
from saga_core.errors import ErrorKind, InputValidationError, Problem
from sagafleet.migrate import DatabaseNotMigrated
from workers.dead_letters.failures import MAX_RETRY_DELAY_S, judge_failure, retry_delay_s


def _wrapped(driver_error: Exception) -> EventStoreError:
    """A driver error as a store boundary wraps it (raise ... from)."""
    try:
        try:
            raise driver_error
        except Exception as exc:
            raise EventStoreError(f"database error: {exc}") from exc
    except EventStoreError as wrapped:
        return wrapped


@pytest.mark.parametrize("error", [
    StoreUnavailable("database unavailable"),
    RaceLost("lost 20 races"),
    DatabaseNotMigrated("fleet/0003 pending"),
    psycopg.OperationalError("server closed the connection"),
    redis.exceptions.ConnectionError("refused"),
    redis.exceptions.TimeoutError("timed out"),
    KombuOperationalError("broker gone"),
    ConnectionRefusedError("refused"),
    _wrapped(psycopg.InterfaceError("the connection is closed")),
])
def test_transient_failures_are_retried_never_dead_lettered(error: Exception) -> None:
    assert judge_failure(error).retry


@pytest.mark.parametrize(("error", "kind"), [
    (MalformedMessage("saga commands take keyword arguments only"), ErrorKind.INVALID_INPUT),
    (InputValidationError("trip", [Problem("input.nights", "type", "not an int")]),
     ErrorKind.INVALID_INPUT),
    (SagaNotFound("no saga 'x'"), ErrorKind.NOT_FOUND),
    (IdempotencyConflict("key 'k' already started another saga"), ErrorKind.CONFLICT),
    (KeyError("definition"), ErrorKind.INVALID_INPUT),
    (RuntimeError("a bug"), ErrorKind.FAILURE),
])
def test_commands_that_can_never_succeed_are_dead_lettered_with_their_kind(
    error: Exception, kind: ErrorKind
) -> None:
    verdict = judge_failure(error)
    assert not verdict.retry and verdict.kind is kind
    assert type(error).__name__ in verdict.reason


def test_an_error_raised_while_handling_a_driver_error_is_judged_on_its_own() -> None:
    # given a KeyError raised inside an except block for a connection error (no "from")
    try:
        try:
            raise OSError("refused")
        except OSError:
            raise KeyError("definition") from None
    except KeyError as exc:
        verdict = judge_failure(exc)
    # then it is what it is: a malformed command
    assert not verdict.retry and verdict.kind is ErrorKind.INVALID_INPUT


def test_retry_delays_grow_stay_under_the_cap_and_are_the_same_for_the_same_task() -> None:
    delays = [retry_delay_s(n, cap_s=8.0, task_id="t-1") for n in range(12)]
    assert all(0 <= d <= 8.0 for d in delays)
    assert delays == [retry_delay_s(n, cap_s=8.0, task_id="t-1") for n in range(12)]
    assert retry_delay_s(0, cap_s=8.0, task_id="t-1") <= 1.0  # the first waits at most 1 s
    assert all(retry_delay_s(40, cap_s=1e6, task_id=f"t-{i}") <= MAX_RETRY_DELAY_S
               for i in range(20))
