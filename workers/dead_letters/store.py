"""Dead letters: broker messages that can never succeed, kept whole for an operator.

A dead letter is written only for a command that no retry can help (see
:mod:`workers.dead_letters.failures`); it keeps the whole message, its Celery task id, the reason
and the error kind, so that once the cause is fixed (the missing definition registered, say)
an operator can **requeue** it — the same message, under the same task id, to the same task
— or **discard** it, saying why. Both are recorded with who and when; a letter is resolved
once (a second requeue does nothing and says so).

Each letter records its **tenant**, proven when it was kept (:mod:`workers.dead_letters.tenants`;
None when no tenant is proven to own it), and answers only to that tenant: every read and
action here takes the principal it is for and never shows, counts or resolves a letter that
does not answer to it (:func:`saga_core.access.roles.answers_to`) — another tenant's letter is
"not found", as one that never existed; a letter of unknown tenant is the ``fleet_operator``
role's alone.

This module is the only one that reads or writes ``fleet.dead_letters`` (the projector's
metrics count its rows by SQL, as they count the sweeper's redeliveries, since projections
never import workers). Every body goes through :func:`dead_letter_body` first: the one place
to mask what must never be stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from events import EventStore
from saga_core.access.roles import Action, Principal, answers_to, check_permitted
from saga_core.errors import ErrorKind, SagaError
from saga_core.limits import LimitExceeded, check_command_message
from workers.celery_app import STEP_TASK

MAX_REASON_CHARS = 2000
"""A reason is a message for a person; longer ones are cut (the message itself never is)."""

_WRAPPED = "$json"
# jsonb cannot hold the NUL character; such a message is kept as its JSON text instead.


class DeadLetterStatus(StrEnum):
    """Where a dead letter stands: waiting for an operator, or resolved one way."""

    OPEN = "open"
    REQUEUED = "requeued"
    DISCARDED = "discarded"


class DeadLetterNotFound(SagaError):
    """No dead letter has this id."""

    kind = ErrorKind.NOT_FOUND


class DeadLetterClosed(SagaError):
    """The dead letter cannot be resolved this way: it was resolved otherwise, or it was
    recorded before whole messages were kept and cannot be requeued."""

    kind = ErrorKind.CONFLICT


@dataclass(frozen=True)
class DeadLetter:
    """One stored dead letter (``message`` is None only for letters from before migration
    0003, which kept a truncated ``body`` text instead)."""

    id: int
    task: str
    task_id: str | None
    message: dict[str, Any] | None
    body: str | None
    reason: str
    error_kind: str | None
    status: DeadLetterStatus
    recorded_at: datetime
    resolved_by: str | None
    resolved_at: datetime | None
    resolution: str | None
    refusal: str | None = None  # why a signed command was refused (unsigned, replayed, ...)
    tenant: str | None = None  # the tenant proven to own it; None: unknown (fleet_operator's)

    def __post_init__(self) -> None:
        # Rows hand the status over as text.
        object.__setattr__(self, "status", DeadLetterStatus(self.status))

    @property
    def args(self) -> list[Any]:
        """The message's positional arguments, as they arrived."""
        return list(_unwrapped(self.message).get("args") or [])

    @property
    def kwargs(self) -> dict[str, Any]:
        """The message's keyword arguments, as they arrived."""
        return dict(_unwrapped(self.message).get("kwargs") or {})


@dataclass(frozen=True)
class Resolution:
    """What a requeue or discard did: ``changed`` is False when the letter was already
    resolved that way (nothing was done again); ``letter`` is the letter after it."""

    changed: bool
    letter: DeadLetter


OVERSIZED = "$oversized"
"""The one key of a letter's message whose command was over the size limit (not kept)."""


def dead_letter_body(task: str, args: Any, kwargs: Any) -> dict[str, Any]:
    """The body a dead letter keeps for a message of ``task``: its arguments, as they came.

    The one seam where a body is shaped before it is stored (the worker withholds secret
    input fields from it, ``application.secrets.inputs.withhold_secrets``). A command over
    ``command_message_bytes`` is not kept: only what the limit said of it (such a letter
    cannot be requeued; the agent must send a smaller command).
    """
    if task != STEP_TASK:
        try:
            check_command_message(args, kwargs)
        except LimitExceeded as exc:
            return {OVERSIZED: str(exc)}
    return {"args": list(args) if isinstance(args, list | tuple) else args,
            "kwargs": kwargs}


def _storable(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as jsonb can hold it: a message with a NUL character (which jsonb refuses)
    is kept as its JSON text, so no message is ever refused a dead letter."""
    text = json.dumps(body, default=str)
    if "\\u0000" in text:
        return {_WRAPPED: text}
    kept: dict[str, Any] = json.loads(text)  # default=str: anything else kept as its text
    return kept


def _unwrapped(message: dict[str, Any] | None) -> dict[str, Any]:
    if message is None:
        return {}
    if set(message) == {_WRAPPED}:
        return dict(json.loads(message[_WRAPPED]))
    return message


_COLUMNS = ("id, task, task_id, message, body, reason, error_kind, status, recorded_at,"
            " resolved_by, resolved_at, resolution, refusal, tenant")

_ANSWERS_TO = "(tenant = %(tenant)s OR (tenant IS NULL AND %(fleet)s))"
# answers_to() in SQL: the viewer's tenant's letters, and the unknown tenant's to the fleet
# role; the Python rule checks every row again before it leaves this module.


def _scope(viewer: Principal) -> dict[str, Any]:
    return {"tenant": viewer.tenant, "fleet": answers_to(viewer, None)}


class DeadLetters:
    """``fleet.dead_letters``: record, list, show, requeue and discard."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def record(self, task: str, task_id: str | None, body: dict[str, Any], reason: str,
               kind: ErrorKind, *, tenant: str | None, refusal: str | None = None) -> bool:
        """Keep a message that can never succeed; False when its letter is already open
        (a redelivery of a message that was dead-lettered before its ack was lost).
        ``tenant``: the tenant proven to own it
        (:func:`workers.dead_letters.tenants.letter_tenant`),
        None when unknown; ``refusal``: why a signed command was refused
        (``saga_core.access.signed_envelopes.Refusal``).

        Raises StoreUnavailable (and the store's other errors): the caller must then keep
        the message in the broker, since nothing was kept here.
        """
        with self._store.connection() as conn:
            row = conn.execute(
                "INSERT INTO fleet.dead_letters"
                " (task, task_id, message, reason, error_kind, refusal, tenant)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (task, task_id) WHERE status = 'open' AND task_id IS NOT NULL"
                " DO NOTHING RETURNING id",
                (task, task_id, Jsonb(_storable(body)), reason[:MAX_REASON_CHARS],
                 kind.value, refusal, tenant or None),
            ).fetchone()
        return row is not None

    def open_letters(self, viewer: Principal, limit: int = 1000) -> list[DeadLetter]:
        """The open letters that answer to ``viewer``, oldest first (at most ``limit``);
        ``NotPermitted`` unless a role of it allows dead letters."""
        check_permitted(viewer, Action.DEAD_LETTERS, "dead letters")
        with self._store.connection() as conn, conn.cursor(
                row_factory=class_row(DeadLetter)) as cur:
            letters = cur.execute(
                f"SELECT {_COLUMNS} FROM fleet.dead_letters"  # noqa: S608
                f" WHERE status = 'open' AND {_ANSWERS_TO} ORDER BY id LIMIT %(limit)s",
                {**_scope(viewer), "limit": limit}).fetchall()
        return [letter for letter in letters if answers_to(viewer, letter.tenant)]

    def open_count(self, viewer: Principal) -> int:
        """How many open letters answer to ``viewer`` (what a reader without the operator
        role is shown: its tenant's, and to the fleet role the unknown tenant's too)."""
        with self._store.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM fleet.dead_letters"  # noqa: S608
                f" WHERE status = 'open' AND {_ANSWERS_TO}", _scope(viewer)).fetchone()
        return int(row[0]) if row else 0

    def get(self, letter_id: int, viewer: Principal) -> DeadLetter:
        """The letter with this id, if it answers to ``viewer`` (``NotPermitted`` unless a
        role of it allows dead letters); DeadLetterNotFound for another tenant's too."""
        check_permitted(viewer, Action.DEAD_LETTERS, f"dead letter {letter_id}")
        with self._store.connection() as conn, conn.cursor(
                row_factory=class_row(DeadLetter)) as cur:
            letter = cur.execute(
                f"SELECT {_COLUMNS} FROM fleet.dead_letters"  # noqa: S608
                f" WHERE id = %(id)s AND {_ANSWERS_TO}",
                {**_scope(viewer), "id": letter_id}).fetchone()
        if letter is None or not answers_to(viewer, letter.tenant):
            raise DeadLetterNotFound(f"no dead letter {letter_id}")
        return letter

    def requeue(self, letter_id: int, principal: Principal, reason: str,
                publish: Callable[[DeadLetter], None]) -> Resolution:
        """Publish the letter's message again (``publish``) and mark it requeued, once, as
        done by ``principal`` (``NotPermitted`` unless a role of it allows dead letters;
        ``DeadLetterNotFound`` for a letter that does not answer to it).

        The row stays locked while ``publish`` runs, so two operators cannot requeue it
        twice; if publishing fails, nothing is marked. If the mark is lost after a
        successful publish, a second requeue publishes the same task id again, which every
        command absorbs (they are idempotent under redelivery).
        """
        return self._resolve(letter_id, DeadLetterStatus.REQUEUED, principal, reason, publish)

    def discard(self, letter_id: int, principal: Principal, reason: str) -> Resolution:
        """Mark the letter discarded (kept, with who and why), once, as done by
        ``principal`` (``NotPermitted`` unless a role of it allows dead letters;
        ``DeadLetterNotFound`` for a letter that does not answer to it)."""
        return self._resolve(letter_id, DeadLetterStatus.DISCARDED, principal, reason, None)

    def _resolve(self, letter_id: int, status: DeadLetterStatus, principal: Principal,
                 reason: str, publish: Callable[[DeadLetter], None] | None) -> Resolution:
        check_permitted(principal, Action.DEAD_LETTERS, f"dead letter {letter_id}")
        with self._store.connection() as conn, conn.transaction(), conn.cursor(
                row_factory=class_row(DeadLetter)) as cur:
            letter = cur.execute(
                f"SELECT {_COLUMNS} FROM fleet.dead_letters"  # noqa: S608
                f" WHERE id = %(id)s AND {_ANSWERS_TO} FOR UPDATE",
                {**_scope(principal), "id": letter_id}).fetchone()
            if letter is None or not answers_to(principal, letter.tenant):
                raise DeadLetterNotFound(f"no dead letter {letter_id}")
            if letter.status is status:
                return Resolution(changed=False, letter=letter)
            if letter.status is not DeadLetterStatus.OPEN:
                raise DeadLetterClosed(
                    f"dead letter {letter_id} was already {letter.status} by "
                    f"{letter.resolved_by} at {letter.resolved_at}: {letter.resolution}")
            if publish is not None:
                if letter.message is None:
                    raise DeadLetterClosed(
                        f"dead letter {letter_id} was recorded before whole messages were "
                        "kept (only a truncated body): it cannot be requeued; discard it")
                if OVERSIZED in letter.message:
                    raise DeadLetterClosed(
                        f"dead letter {letter_id} was over the command size limit and its "
                        "message was not kept: it cannot be requeued; discard it")
                publish(letter)
            resolved = cur.execute(
                "UPDATE fleet.dead_letters SET status = %s, resolved_by = %s,"  # noqa: S608
                " resolved_at = now(), resolution = %s WHERE id = %s"
                f" RETURNING {_COLUMNS}",
                (status.value, principal.name, reason, letter_id)).fetchone()
        if resolved is None:  # pragma: no cover - the row is locked: it is still there
            raise DeadLetterNotFound(f"no dead letter {letter_id}")
        return Resolution(changed=True, letter=resolved)
