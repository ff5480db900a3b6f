"""The operator queue: what waits for a human, read from the ``operator_queue`` read model.

Which actions answer an entry, and whether a click repeats one, is saga_core's rule
(:mod:`saga_core.engine.resolution`), applied on the write side when the action is recorded.
"""

from __future__ import annotations

from psycopg import sql
from psycopg.rows import class_row

from events.definition_store.port import check_tenant
from projections.context import ProjectionContext
from projections.rows import QueueRow, columns
from projections.tables import active_version, table


def operator_queue(
    ctx: ProjectionContext, *, tenant: str, name: str = "sagas", limit: int | None = None,
) -> list[QueueRow]:
    """``tenant``'s queue entries (never another tenant's), the nearest deadline first; at
    most ``limit`` of them when given (a page: see saga_core.limits.QUEUE_PAGE_ROWS)."""
    check_tenant(tenant)
    with ctx.connection() as conn:
        version = active_version(conn, name)
        cols = sql.SQL(", ").join(map(sql.Identifier, columns(QueueRow)))
        query = sql.SQL("SELECT {cols} FROM {t} WHERE tenant = %s").format(
            cols=cols, t=table("operator_queue", version)
        )
        query += sql.SQL(" ORDER BY deadline NULLS LAST, requested_at, saga_id LIMIT %s")
        with conn.cursor(row_factory=class_row(QueueRow)) as cur:
            return cur.execute(query, (tenant, limit)).fetchall()
