"""Claims on queue requests: "I'm on it", visible to colleagues and recorded.

A person who takes a request in hand claims it; the queue shows everyone who holds it and
since when, so two people do not work the same request at 3 a.m. A claim is advice, not a
lock: anyone who may answer still can (the saga's log decides who answered first), and a
colleague may take a claim over. Every claim is a row of ``fleet.queue_claims`` (migration
room ``console``) that is kept when it ends, recording who claimed it, when, and how it ended:
released by its holder, or taken over (by whom, when). Claims are per tenant; a request is
``(saga, entry, step, kind)`` as the operator queue names it.

:class:`ClaimStore` reads and writes the table; :func:`claim_request` and
:func:`release_request` are the two things a person does, each in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

import psycopg
from psycopg.rows import class_row

from events.definition_store.port import check_tenant
from saga_core.errors import ErrorKind, SagaError

__all__ = ["Claim", "ClaimOutcome", "ClaimStore", "NotClaimable", "RequestKey"]

_OPEN: Final = """
SELECT claim_id, tenant, saga_id, entry, step_id, kind, claimed_by, claimed_at, ended_at,
       ended_by, ending
  FROM fleet.queue_claims
 WHERE tenant = %s AND saga_id = ANY(%s) AND ended_at IS NULL
"""
_HISTORY: Final = """
SELECT claim_id, tenant, saga_id, entry, step_id, kind, claimed_by, claimed_at, ended_at,
       ended_by, ending
  FROM fleet.queue_claims
 WHERE tenant = %s AND saga_id = %s AND entry = %s AND step_id = %s AND kind = %s
 ORDER BY claimed_at, claim_id
"""
_HELD: Final = """
SELECT claim_id, claimed_by FROM fleet.queue_claims
 WHERE tenant = %s AND saga_id = %s AND entry = %s AND step_id = %s AND kind = %s
   AND ended_at IS NULL
 FOR UPDATE
"""
_END: Final = """
UPDATE fleet.queue_claims SET ended_at = %s, ended_by = %s, ending = %s WHERE claim_id = %s
"""
_INSERT: Final = """
INSERT INTO fleet.queue_claims (tenant, saga_id, entry, step_id, kind, claimed_by, claimed_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (tenant, saga_id, entry, step_id, kind) WHERE ended_at IS NULL DO NOTHING
RETURNING claim_id
"""


class NotClaimable(SagaError):
    """A claim or release that cannot be recorded: the message says why."""

    kind = ErrorKind.CONFLICT


@dataclass(frozen=True)
class RequestKey:
    """One queue request, as the operator queue names it."""

    saga_id: str
    entry: str
    step_id: str
    kind: str

    def params(self) -> tuple[str, str, str, str]:
        """The key's columns, in the table's order."""
        return (self.saga_id, self.entry, self.step_id, self.kind)


@dataclass(frozen=True)
class Claim:
    """One claim: who holds (or held) a request, since when, and how it ended."""

    claim_id: int
    tenant: str
    saga_id: str
    entry: str
    step_id: str
    kind: str
    claimed_by: str
    claimed_at: datetime
    ended_at: datetime | None
    ended_by: str | None
    ending: str | None

    @property
    def key(self) -> RequestKey:
        """The request claimed."""
        return RequestKey(self.saga_id, self.entry, self.step_id, self.kind)


class ClaimOutcome(StrEnum):
    """What a claim or release did."""

    CLAIMED = "claimed"
    TAKEN_OVER = "taken_over"
    ALREADY_YOURS = "already_yours"
    RELEASED = "released"


@dataclass
class ClaimStore:
    """The claims table of the fleet's database (``store``: anything with ``connection()``,
    the PostgreSQL event store or a read context)."""

    store: Any

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self.store.connection() as conn, conn.transaction():
            yield conn

    def open_claims(self, tenant: str, saga_ids: Sequence[str]) -> dict[RequestKey, Claim]:
        """The open claim of each request of these sagas that has one."""
        check_tenant(tenant)
        if not saga_ids:
            return {}
        with self.store.connection() as conn, conn.cursor(row_factory=class_row(Claim)) as cur:
            rows = cur.execute(_OPEN, (tenant, list(saga_ids))).fetchall()
        return {row.key: row for row in rows}

    def history(self, tenant: str, key: RequestKey) -> list[Claim]:
        """Every claim of one request, oldest first (ended ones too)."""
        check_tenant(tenant)
        with self.store.connection() as conn, conn.cursor(row_factory=class_row(Claim)) as cur:
            found: list[Claim] = cur.execute(_HISTORY, (tenant, *key.params())).fetchall()
        return found

    def claim(self, tenant: str, key: RequestKey, who: str, now: datetime) -> ClaimOutcome:
        """``who`` is on it: a new claim, ending (as taken over) a colleague's open one."""
        check_tenant(tenant)
        with self._transaction() as conn:
            held = conn.execute(_HELD, (tenant, *key.params())).fetchone()
            if held is not None and held[1] == who:
                return ClaimOutcome.ALREADY_YOURS
            if held is not None:
                conn.execute(_END, (now, who, "taken_over", held[0]))
            if conn.execute(_INSERT, (tenant, *key.params(), who, now)).fetchone() is None:
                # Another claim was inserted since the look above (two people at once).
                raise NotClaimable("someone claimed this request at the same moment: reload "
                                   "the queue to see who")
        return ClaimOutcome.TAKEN_OVER if held is not None else ClaimOutcome.CLAIMED

    def release(self, tenant: str, key: RequestKey, who: str, now: datetime) -> ClaimOutcome:
        """``who`` lets go of their claim (NotClaimable if they hold none on it)."""
        check_tenant(tenant)
        with self._transaction() as conn:
            held = conn.execute(_HELD, (tenant, *key.params())).fetchone()
            if held is None or held[1] != who:
                raise NotClaimable(f"{who!r} holds no claim on this request"
                                   + (f" ({held[1]!r} does)" if held is not None else ""))
            conn.execute(_END, (now, who, "released", held[0]))
        return ClaimOutcome.RELEASED
