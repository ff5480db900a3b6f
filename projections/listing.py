"""One tenant's sagas, newest first, a page at a time, from the ``saga_summary`` read model.

Pages are keyset pages: each ends with a :class:`SagaCursor` (the last saga's start time and
id), and the next page holds the sagas strictly before it in the order
``(started_at DESC, saga_id DESC)``. Sagas started meanwhile never shift a page (they sort
before the first), and no row is skipped or shown twice, unlike an OFFSET.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import sql
from psycopg.rows import class_row

from events.definition_store.port import check_tenant
from events.errors import InvalidArgument
from projections.context import ProjectionContext
from projections.rows import SummaryRow, columns
from projections.tables import active_version, table
from saga_core.contracts import SagaStatus

_SEPARATOR = "|"  # never in an ISO time; a saga id after it may hold anything


@dataclass(frozen=True)
class SagaCursor:
    """Where a page ended: the sagas after it started before ``started_at`` (or at the same
    time with a smaller id). Written as ``<ISO start time>|<saga id>``."""

    started_at: datetime
    saga_id: str

    def __str__(self) -> str:
        return f"{self.started_at.isoformat()}{_SEPARATOR}{self.saga_id}"

    @classmethod
    def parse(cls, text: str) -> SagaCursor:
        """The cursor a page printed; InvalidArgument naming the text if it is not one."""
        when, separator, saga_id = text.partition(_SEPARATOR)
        try:
            started_at = datetime.fromisoformat(when)
        except ValueError:
            started_at = None
        if not separator or not saga_id or started_at is None or started_at.tzinfo is None:
            raise InvalidArgument(
                f"a page cursor is '<ISO start time with offset>|<saga id>' as a page printed "
                f"it, not {text[:200]!r}")
        return cls(started_at, saga_id)


@dataclass(frozen=True)
class SagaPage:
    """Up to a page of sagas, newest first; ``next_after`` continues (None: the last page)."""

    tenant: str
    sagas: list[SummaryRow]
    next_after: SagaCursor | None


def saga_page(
    ctx: ProjectionContext, *, tenant: str, limit: int, status: SagaStatus | None = None,
    definition: str | None = None, after: SagaCursor | None = None, name: str = "sagas",
) -> SagaPage:
    """``tenant``'s sagas (never another tenant's), newest first, at most ``limit``; only
    those in ``status`` or of ``definition`` when given; after ``after`` when given."""
    check_tenant(tenant)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"a page holds at least one saga, not {limit!r}")
    where = [sql.SQL("tenant = %(tenant)s")]
    if status is not None:
        where.append(sql.SQL("state = %(status)s"))
    if definition is not None:
        where.append(sql.SQL("definition_name = %(definition)s"))
    if after is not None:
        where.append(sql.SQL("(started_at, saga_id) < (%(after_at)s, %(after_id)s)"))
    params = {
        "tenant": tenant, "status": str(status) if status else None, "definition": definition,
        "after_at": after.started_at if after else None,
        "after_id": after.saga_id if after else None,
        "rows": limit + 1,  # one more than shown says whether another page follows
    }
    with ctx.connection() as conn:
        version = active_version(conn, name)
        query = sql.SQL(
            "SELECT {cols} FROM {t} WHERE {where}"
            " ORDER BY started_at DESC, saga_id DESC LIMIT %(rows)s"
        ).format(
            cols=sql.SQL(", ").join(map(sql.Identifier, columns(SummaryRow))),
            t=table("saga_summary", version),
            where=sql.SQL(" AND ").join(where),
        )
        with conn.cursor(row_factory=class_row(SummaryRow)) as cur:
            rows = cur.execute(query, params).fetchall()
    shown = rows[:limit]
    more = len(rows) > limit
    return SagaPage(tenant, shown,
                    SagaCursor(shown[-1].started_at, shown[-1].saga_id) if more else None)
