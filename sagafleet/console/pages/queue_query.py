"""Which of a tenant's queue entries the queue page shows: filters, order, search and paging.

:func:`parse_queue_query` reads the page's query string into a :class:`QueueQuery` (typed:
a value it cannot read is :class:`BadQueueFilter`, a 400 naming the parameter and what it
takes); :func:`queue_page_rows` asks the operator queue read model for one page of it, in
SQL, keyset-paged (``after`` is the last entry shown, never an offset, so a page does not
shift while entries come and go); :func:`queue_counts` counts what waits, per state.

Filters: ``gate`` (the role the gate asks for), ``risk`` (the gate's risk class),
``definition``, ``entry`` (approval or manual_intervention), ``age`` (asked at least this
long ago: ``30m``, ``2h``, ``1d``), ``q`` (words found in the saga id, step, definition,
reason or the evidence, which holds masked arguments only). Orders: ``urgent`` (nearest
deadline, then oldest: the default), ``oldest``, ``newest``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from psycopg import sql
from psycopg.rows import class_row

from events.definition_store.port import check_tenant
from projections import ProjectionContext, QueueRow
from projections.rows import columns
from projections.tables import active_version, table
from saga_core.errors import ErrorKind, SagaError
from sagafleet.console.pages.queue_items import URGENT_WITHIN  # its one owner

__all__ = ["PAGE_SIZE", "BadQueueFilter", "QueueCounts", "QueueCursor", "QueueQuery",
           "QueueSort", "parse_queue_query", "queue_counts", "queue_page_rows"]

PAGE_SIZE: Final = 100
"""Entries per page."""
MAX_FILTER_CHARS: Final = 200
MAX_AGE: Final = timedelta(days=366)
_AGE: Final = re.compile(r"(\d{1,6})([mhd])")
_AGE_UNITS: Final = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
ENTRIES: Final = ("approval", "manual_intervention")


class BadQueueFilter(SagaError):
    """A queue page's query string holds a value the page cannot read; the message names the
    parameter and what it takes."""

    kind = ErrorKind.INVALID_INPUT


class QueueSort(StrEnum):
    """The orders the queue can be read in."""

    URGENT = "urgent"
    OLDEST = "oldest"
    NEWEST = "newest"


@dataclass(frozen=True)
class QueueCursor:
    """The last entry a page showed: the next page starts after it (in the page's order)."""

    deadline: datetime | None
    requested_at: datetime
    saga_id: str
    entry: str
    step_id: str
    kind: str

    @classmethod
    def of(cls, row: QueueRow) -> QueueCursor:
        """The cursor after ``row``."""
        return cls(row.deadline, row.requested_at, row.saga_id, row.entry, row.step_id,
                   row.kind)

    def encode(self) -> str:
        """The cursor as one URL-safe token."""
        raw = json.dumps([self.deadline.isoformat() if self.deadline else None,
                          self.requested_at.isoformat(), self.saga_id, self.entry,
                          self.step_id, self.kind], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> QueueCursor:
        """The cursor a page's "next" link carries (BadQueueFilter if it is not one)."""
        try:
            padded = token + "=" * (-len(token) % 4)
            parts = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
            deadline, requested, saga_id, entry, step_id, kind = parts
            if not all(isinstance(p, str) for p in (requested, saga_id, entry, step_id, kind)):
                raise TypeError("not text")
            return cls(_instant(deadline) if deadline is not None else None,
                       _instant(requested), saga_id, entry, step_id, kind)
        except (ValueError, TypeError, binascii.Error, UnicodeError):
            raise BadQueueFilter("after must be the token of a queue page's 'next' link; "
                                 "reload the queue from its first page") from None


def _instant(text: object) -> datetime:
    if not isinstance(text, str):
        raise TypeError("not a time")
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("naive time")
    return moment


@dataclass(frozen=True)
class QueueQuery:
    """What the person asked the queue page for."""

    gate: str | None = None
    risk: str | None = None
    definition: str | None = None
    entry: str | None = None
    age: timedelta | None = None
    search: str = ""
    sort: QueueSort = QueueSort.URGENT
    after: QueueCursor | None = None

    def params(self, *, after: QueueCursor | None = None) -> dict[str, str]:
        """The query string that asks for this query (another page with ``after``)."""
        found = {"gate": self.gate or "", "risk": self.risk or "",
                 "definition": self.definition or "", "entry": self.entry or "",
                 "age": _age_text(self.age) if self.age else "", "q": self.search,
                 "sort": "" if self.sort is QueueSort.URGENT else self.sort.value,
                 "after": after.encode() if after else ""}
        return {name: value for name, value in found.items() if value}

    @property
    def filtered(self) -> bool:
        """Whether any filter or search narrows the queue."""
        return replace(self, sort=QueueSort.URGENT, after=None) != QueueQuery()


def _age_text(age: timedelta) -> str:
    minutes = int(age.total_seconds() // 60)
    if minutes % (24 * 60) == 0:
        return f"{minutes // (24 * 60)}d"
    if minutes % 60 == 0:
        return f"{minutes // 60}h"
    return f"{minutes}m"


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name, "").strip()
    if not value:
        return None
    if len(value) > MAX_FILTER_CHARS:
        raise BadQueueFilter(f"{name} takes at most {MAX_FILTER_CHARS} characters")
    if not value.isprintable():
        raise BadQueueFilter(f"{name} must be printable text")
    return value


def parse_age(text: str) -> timedelta:
    """``30m``, ``2h`` or ``1d`` as a duration (BadQueueFilter naming ``age`` otherwise)."""
    found = _AGE.fullmatch(text.strip().lower())
    if found is None:
        raise BadQueueFilter(f"age takes a number and a unit (30m, 2h, 1d); got {text!r}")
    age = int(found.group(1)) * _AGE_UNITS[found.group(2)]
    if age > MAX_AGE:
        raise BadQueueFilter(f"age is at most {MAX_AGE.days}d; got {text!r}")
    return age


def parse_queue_query(params: Mapping[str, str]) -> QueueQuery:
    """The queue page's query string as a :class:`QueueQuery`; a value it cannot read is a
    :class:`BadQueueFilter` naming the parameter."""
    entry = _text(params, "entry")
    if entry is not None and entry not in ENTRIES:
        raise BadQueueFilter(f"entry is one of {', '.join(ENTRIES)}; got {entry!r}")
    sort_text = _text(params, "sort") or QueueSort.URGENT.value
    if sort_text not in QueueSort._value2member_map_:
        raise BadQueueFilter(f"sort is one of {', '.join(s.value for s in QueueSort)}; "
                             f"got {sort_text!r}")
    age = _text(params, "age")
    after = _text(params, "after")
    return QueueQuery(gate=_text(params, "gate"), risk=_text(params, "risk"),
                      definition=_text(params, "definition"), entry=entry,
                      age=parse_age(age) if age else None, search=_text(params, "q") or "",
                      sort=QueueSort(sort_text),
                      after=QueueCursor.decode(after) if after else None)


# -- reading -------------------------------------------------------------------------------

def _like(text: str) -> str:
    return "%" + re.sub(r"([\\%_])", r"\\\1", text) + "%"


def _where(query: QueueQuery, tenant: str, now: datetime) -> tuple[sql.Composable, list[Any]]:
    clauses = [sql.SQL("tenant = %s")]
    values: list[Any] = [tenant]
    if query.gate is not None:
        clauses.append(sql.SQL("evidence #>> '{details,gate,role}' = %s"))
        values.append(query.gate)
    if query.risk is not None:
        clauses.append(sql.SQL("evidence #>> '{details,gate,risk_class}' = %s"))
        values.append(query.risk)
    if query.definition is not None:
        clauses.append(sql.SQL("definition_name = %s"))
        values.append(query.definition)
    if query.entry is not None:
        clauses.append(sql.SQL("entry = %s"))
        values.append(query.entry)
    if query.age is not None:
        clauses.append(sql.SQL("requested_at <= %s"))
        values.append(now - query.age)
    for word in query.search.split():
        clauses.append(sql.SQL(
            "(saga_id || ' ' || step_id || ' ' || definition_name || ' ' || reason || ' ' "
            "|| evidence::text) ILIKE %s"))
        values.append(_like(word))
    return sql.SQL(" AND ").join(clauses), values


_URGENT_KEY: Final = sql.SQL(
    "COALESCE(deadline, 'infinity'::timestamptz), requested_at, saga_id, entry, step_id, kind")
"""The urgent order: nearest deadline first (none: last), then the oldest request."""
_TIME_KEY: Final = sql.SQL("requested_at, saga_id, entry, step_id, kind")
"""The oldest-first order (and the row compared with the cursor in either time order)."""
_NEWEST_FIRST: Final = sql.SQL(
    "requested_at DESC, saga_id DESC, entry DESC, step_id DESC, kind DESC")
"""The newest-first order: :data:`_TIME_KEY` with every column descending."""


def _keyset(query: QueueQuery) -> tuple[sql.Composable, list[Any]]:
    """The condition "after the cursor" in the query's order, and its values."""
    after = query.after
    if after is None:
        return sql.SQL(""), []
    tail = [after.requested_at, after.saga_id, after.entry, after.step_id, after.kind]
    if query.sort is QueueSort.URGENT:
        return sql.SQL(" AND ({}) > (COALESCE(%s::timestamptz, 'infinity'::timestamptz), "
                       "%s, %s, %s, %s, %s)").format(_URGENT_KEY), [after.deadline, *tail]
    compare = sql.SQL("<") if query.sort is QueueSort.NEWEST else sql.SQL(">")
    return sql.SQL(" AND ({}) {} (%s, %s, %s, %s, %s)").format(_TIME_KEY, compare), tail


def _order(query: QueueQuery) -> sql.Composable:
    if query.sort is QueueSort.URGENT:
        return sql.SQL(" ORDER BY {}").format(_URGENT_KEY)
    if query.sort is QueueSort.NEWEST:
        return sql.SQL(" ORDER BY {}").format(_NEWEST_FIRST)
    return sql.SQL(" ORDER BY {}").format(_TIME_KEY)


def queue_page_rows(ctx: ProjectionContext, query: QueueQuery, *, tenant: str, now: datetime,
                    limit: int = PAGE_SIZE) -> tuple[list[QueueRow], QueueCursor | None]:
    """One page of ``tenant``'s queue as ``query`` asks, and the cursor of the next page
    (None: this is the last)."""
    check_tenant(tenant)
    where, values = _where(query, tenant, now)
    keyset, after = _keyset(query)
    with ctx.connection() as conn:
        statement = sql.SQL("SELECT {cols} FROM {t} WHERE {where}").format(
            cols=sql.SQL(", ").join(map(sql.Identifier, columns(QueueRow))),
            t=table("operator_queue", active_version(conn, "sagas")), where=where)
        statement += keyset + _order(query) + sql.SQL(" LIMIT %s")
        with conn.cursor(row_factory=class_row(QueueRow)) as cur:
            rows = cur.execute(statement, [*values, *after, limit + 1]).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (QueueCursor.of(rows[-1]) if more and rows else None)


def request_waits(ctx: ProjectionContext, *, tenant: str, saga_id: str, entry: str,
                  step_id: str, kind: str) -> bool:
    """Whether this one request waits in ``tenant``'s queue."""
    check_tenant(tenant)
    with ctx.connection() as conn:
        found = conn.execute(sql.SQL(
            "SELECT 1 FROM {t} WHERE tenant = %s AND saga_id = %s AND entry = %s "
            "AND step_id = %s AND kind = %s").format(
                t=table("operator_queue", active_version(conn, "sagas"))),
            (tenant, saga_id, entry, step_id, kind)).fetchone()
    return found is not None


@dataclass(frozen=True)
class QueueCounts:
    """How many entries wait in the tenant's queue, per state, and how many the query
    matches."""

    approvals: int
    interventions: int
    urgent: int
    matching: int

    @property
    def total(self) -> int:
        """Every entry of the tenant's queue."""
        return self.approvals + self.interventions


def queue_counts(ctx: ProjectionContext, query: QueueQuery, *, tenant: str,
                 now: datetime) -> QueueCounts:
    """The tenant's queue counted per state, and the entries ``query`` matches."""
    check_tenant(tenant)
    where, values = _where(query, tenant, now)
    with ctx.connection() as conn:
        t = table("operator_queue", active_version(conn, "sagas"))
        row = conn.execute(sql.SQL(
            "SELECT count(*) FILTER (WHERE entry = 'approval'), "
            "count(*) FILTER (WHERE entry = 'manual_intervention'), "
            "count(*) FILTER (WHERE deadline <= %s) FROM {t} WHERE tenant = %s").format(t=t),
            (now + URGENT_WITHIN, tenant)).fetchone()
        matching = conn.execute(sql.SQL("SELECT count(*) FROM {t} WHERE {where}").format(
            t=t, where=where), values).fetchone()
    approvals, interventions, urgent = row if row is not None else (0, 0, 0)
    return QueueCounts(int(approvals), int(interventions), int(urgent),
                       int(matching[0]) if matching is not None else 0)
