"""Which failures of an agent command are retried and which are dead-lettered (the one rule).

An agent's command (``sagafleet.commands.*``) exists only as its broker message until it
takes effect: there is no saga yet for the orchestrator's retries to own. So the command
task itself decides, by this rule, what a failure means:

* **retry** — the command may well succeed later; it stays in the broker (redelivered
  after an exponential, capped backoff), is never dead-lettered and never dropped:

  - a :class:`~saga_core.errors.SagaError` of kind ``UNAVAILABLE`` (``StoreUnavailable``,
    ``RaceLost``, an embedded server that is down),
  - a ``MISCONFIGURED`` one (the deployment is wrong, not the command: it runs once the
    operator fixes the deployment),
  - a driver's connection error anywhere in the exception's cause chain: psycopg
    ``OperationalError``/``InterfaceError``, a pool timeout, redis ``ConnectionError``/
    ``TimeoutError``, kombu ``OperationalError``, any ``OSError``.

* **dead-letter** — nothing about a later attempt would differ: a signed command was
  refused (``UNAUTHENTICATED`` or ``FORBIDDEN``, its reason led by its refusal:
  ``replayed: ...``), the message is malformed,
  the input invalid, the definition or saga unknown, the idempotency key taken by another
  input (kinds ``INVALID_INPUT``, ``NOT_FOUND``, ``CONFLICT``, ``INTEGRITY``), or an
  unexpected error (kind ``FAILURE``: kept for an operator, who requeues it after a fix,
  rather than retried in a loop).

A worker killed mid-command is not a failure this module sees: the unacknowledged message
comes back through the broker (acks late, visibility timeout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import psycopg
import psycopg_pool
import redis.exceptions
from kombu.exceptions import OperationalError as KombuOperationalError

from saga_core.access.signed_envelopes import CommandRefused
from saga_core.definitions.definition import RetryPolicy
from saga_core.engine.backoff import backoff_delay
from saga_core.errors import ErrorKind, SagaError

RETRIED_KINDS: Final = frozenset({ErrorKind.UNAVAILABLE, ErrorKind.MISCONFIGURED})
"""Error kinds after which a command is tried again."""

TRANSIENT_DRIVER_ERRORS: Final = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg_pool.PoolTimeout,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    KombuOperationalError,
    OSError,
)
"""Driver errors that mean "a server could not be reached", wherever they were wrapped."""

FIRST_RETRY_DELAY_S: Final = 1.0
MAX_RETRY_DELAY_S: Final = 60.0


@dataclass(frozen=True)
class CommandFailure:
    """What a command's failure means: retry it later, or dead-letter it as ``kind``."""

    retry: bool
    kind: ErrorKind
    reason: str
    # a signed-command refusal (saga_core.access.signed_envelopes.Refusal)
    refusal: str | None = None


def judge_failure(exc: BaseException) -> CommandFailure:
    """The verdict on ``exc`` by the rule above, with a reason naming the error."""
    reason = f"{type(exc).__name__}: {exc}"
    if _caused_by_transient_driver_error(exc):
        return CommandFailure(retry=True, kind=ErrorKind.UNAVAILABLE, reason=reason)
    if isinstance(exc, CommandRefused):
        return CommandFailure(retry=False, kind=exc.kind, reason=str(exc),
                              refusal=str(exc.refusal))
    if isinstance(exc, SagaError):
        return CommandFailure(retry=exc.kind in RETRIED_KINDS, kind=exc.kind, reason=reason)
    if isinstance(exc, TypeError | ValueError | KeyError):  # pydantic's errors among them
        return CommandFailure(retry=False, kind=ErrorKind.INVALID_INPUT, reason=reason)
    return CommandFailure(retry=False, kind=ErrorKind.FAILURE, reason=reason)


def _caused_by_transient_driver_error(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, TRANSIENT_DRIVER_ERRORS):
            return True
        seen.add(id(current))
        # Only what it was raised *from* (how every boundary wraps a driver error); an
        # error merely raised while handling another is judged on its own.
        current = current.__cause__
    return False


def retry_delay_s(retries: int, cap_s: float, task_id: str) -> float:
    """Seconds before retry number ``retries + 1`` of the command ``task_id``: the project's
    backoff (:func:`saga_core.backoff_delay`: doubling from 1 s, full jitter drawn from the
    task id, so commands that failed together do not all come back at once), capped at
    ``cap_s`` and at :data:`MAX_RETRY_DELAY_S`."""
    policy = RetryPolicy(base_delay_s=FIRST_RETRY_DELAY_S,
                         max_delay_s=min(cap_s, MAX_RETRY_DELAY_S))
    return backoff_delay(policy, task_id, retries + 1).total_seconds()
