"""One tenant's sagas for the operator console: filtered, newest first, keyset-paged both ways.

A page is ``(started_at DESC, saga_id DESC)`` order, like :mod:`projections.listing`, and
moves by :class:`~projections.listing.SagaCursor`: ``older`` continues after the last row
shown, ``newer`` goes back before the first. Sagas started meanwhile sort before every
cursor, so paging back and forth never shifts, skips or repeats a row (no OFFSET, ever).

Every filter has an index that leads with the tenant and ends with the page order
(migrations 0002 and 0004), so a page costs one index range scan whatever the table size:

* ``status`` — the saga's state (a terminal one, or RUNNING, COMPENSATING, or
  MANUAL_INTERVENTION: paused for a person);
* ``definition`` — the definition's name;
* ``started_after`` / ``started_before`` — a range of the page order itself;
* ``stuck`` — not terminal and unchanged for at least ``stuck_after_s`` seconds by the
  database clock: the sagas behind the metrics' ``stuck_saga_max_age_s`` and, with the
  default of the alerts' capture threshold, the ones the business alerts would flag first;
* ``saga_ids`` — a search already resolved to the saga ids it can mean (a saga id, or the
  saga an idempotency key started: the caller maps a key to its id), looked up by key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.rows import class_row

from events.definition_store.port import check_definition_name, check_tenant
from events.errors import InvalidArgument
from projections.alerts import AlertThresholds
from projections.context import ProjectionContext
from projections.listing import SagaCursor
from projections.rows import SummaryRow, columns
from projections.tables import active_version, table
from saga_core.contracts import SagaStatus
from saga_core.keys import text_problem
from saga_core.limits import SAGA_PAGE_ROWS

DEFAULT_STUCK_AFTER_S = AlertThresholds().unconfirmed_capture_s
"""No progress for this long and not terminal: stuck (the alerts' capture threshold)."""

MAX_SEARCH_IDS = 8
"""A search names a handful of candidate ids at most (an id, the id a key maps to)."""


@dataclass(frozen=True)
class SagaFilter:
    """Which of a tenant's sagas a list shows; every part optional, all parts must hold."""

    status: SagaStatus | None = None
    definition: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    stuck: bool = False
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S
    saga_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("started_after", "started_before"):
            when = getattr(self, name)
            if when is not None and when.tzinfo is None:
                raise InvalidArgument(f"{name} needs a time zone offset, not {when.isoformat()}")
        if isinstance(self.stuck_after_s, bool) or not (
                isinstance(self.stuck_after_s, int | float) and self.stuck_after_s >= 0):
            raise InvalidArgument(
                f"stuck_after_s is a number of seconds >= 0, not {self.stuck_after_s!r}")
        if self.saga_ids is not None and len(self.saga_ids) > MAX_SEARCH_IDS:
            raise InvalidArgument(f"a search names at most {MAX_SEARCH_IDS} saga ids")
        # A value no saga can have (a NUL, say) is invalid input, not a database error.
        if self.definition is not None:
            check_definition_name(self.definition)
        if self.saga_ids is not None and any(text_problem(i) for i in self.saga_ids):
            raise InvalidArgument("a search is plain text: no NUL or lone surrogate")


@dataclass(frozen=True)
class BrowsePage:
    """Up to a page of sagas, newest first; ``older``/``newer`` move on (None: no more)."""

    tenant: str
    sagas: list[SummaryRow]
    older: SagaCursor | None
    newer: SagaCursor | None
    filters: SagaFilter = field(default_factory=SagaFilter)


def _where(filters: SagaFilter) -> tuple[list[sql.Composable], dict[str, Any]]:
    where: list[sql.Composable] = [sql.SQL("tenant = %(tenant)s")]
    params: dict[str, Any] = {}
    if filters.status is not None:
        where.append(sql.SQL("state = %(status)s"))
        params["status"] = str(filters.status)
    if filters.definition is not None:
        where.append(sql.SQL("definition_name = %(definition)s"))
        params["definition"] = filters.definition
    if filters.started_after is not None:
        where.append(sql.SQL("started_at >= %(started_after)s"))
        params["started_after"] = filters.started_after
    if filters.started_before is not None:
        where.append(sql.SQL("started_at < %(started_before)s"))
        params["started_before"] = filters.started_before
    if filters.stuck:
        # Spelled as the partial index's predicate, so the planner can use that index.
        where.append(sql.SQL(
            "state NOT IN ('COMPLETED', 'COMPENSATED', 'PARTIALLY_COMPENSATED',"
            " 'COMMITTED_WITH_REPAIR')"))
        where.append(sql.SQL("updated_at < now() - make_interval(secs => %(stuck_after)s)"))
        params["stuck_after"] = float(filters.stuck_after_s)
    if filters.saga_ids is not None:
        where.append(sql.SQL("saga_id = ANY(%(saga_ids)s)"))
        params["saga_ids"] = list(filters.saga_ids)
    return where, params


def browse_sagas(
    ctx: ProjectionContext, *, tenant: str, limit: int, filters: SagaFilter | None = None,
    older_than: SagaCursor | None = None, newer_than: SagaCursor | None = None,
    name: str = "sagas",
) -> BrowsePage:
    """A page of ``tenant``'s sagas (never another tenant's) that pass ``filters``, newest
    first: the newest ones; those just older than ``older_than``; or those just newer than
    ``newer_than`` (the page before; the newest page when fewer than a page are newer)."""
    check_tenant(tenant)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"a page holds at least one saga, not {limit!r}")
    SAGA_PAGE_ROWS.check("a saga page", limit)
    if older_than is not None and newer_than is not None:
        raise InvalidArgument("a page is older than one cursor or newer than another, not both")
    chosen = filters or SagaFilter()
    where, params = _where(chosen)
    params |= {"tenant": tenant, "rows": limit + 1}  # one more: does another page follow?
    cursor = older_than or newer_than
    if cursor is not None:
        where.append(sql.SQL("(started_at, saga_id) {op} (%(at)s, %(id)s)").format(
            op=sql.SQL("<" if older_than is not None else ">")))
        params |= {"at": cursor.started_at, "id": cursor.saga_id}
    order = "ASC" if newer_than is not None else "DESC"
    with ctx.connection() as conn:
        version = active_version(conn, name)
        query = sql.SQL(
            "SELECT {cols} FROM {t} WHERE {where}"
            " ORDER BY started_at {order}, saga_id {order} LIMIT %(rows)s"
        ).format(
            cols=sql.SQL(", ").join(map(sql.Identifier, columns(SummaryRow))),
            t=table("saga_summary", version),
            where=sql.SQL(" AND ").join(where),
            order=sql.SQL(order),
        )
        with conn.cursor(row_factory=class_row(SummaryRow)) as cur:
            rows = cur.execute(query, params).fetchall()
    more = len(rows) > limit
    shown = rows[:limit]
    if newer_than is not None:
        if not more:  # the top of the list: show a whole newest page, not a stub of one
            return browse_sagas(ctx, tenant=tenant, limit=limit, filters=chosen, name=name)
        shown.reverse()
        return BrowsePage(tenant, shown, _cursor(shown[-1]), _cursor(shown[0]), chosen)
    older = _cursor(shown[-1]) if more else None
    newer = _cursor(shown[0]) if older_than is not None and shown else None
    return BrowsePage(tenant, shown, older, newer, chosen)


def _cursor(row: SummaryRow) -> SagaCursor:
    return SagaCursor(row.started_at, row.saga_id)
