"""The operator queue: what waits for a human, and when an operator action is a repeat."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, get_args

from psycopg import sql
from psycopg.rows import class_row

from projections.context import ProjectionContext
from projections.rows import QueueRow, columns
from projections.tables import active_version, table
from saga_core.contracts import StepKind
from saga_core.events import OperatorAction, OperatorActionName, SagaEvent
from saga_core.state import SagaState

OPERATOR_ACTIONS: Final = tuple(get_args(OperatorActionName))
"""The typed operator actions saga_core knows (``sagafleet resolve ACTION``)."""


def operator_queue(
    ctx: ProjectionContext, *, tenant: str | None = None, name: str = "sagas"
) -> list[QueueRow]:
    """Every queue entry (of one tenant, if given), the nearest deadline first."""
    with ctx.connection() as conn:
        version = active_version(conn, name)
        cols = sql.SQL(", ").join(map(sql.Identifier, columns(QueueRow)))
        query = sql.SQL("SELECT {cols} FROM {t} WHERE (%s::text IS NULL OR tenant = %s)").format(
            cols=cols, t=table("operator_queue", version)
        )
        query += sql.SQL(" ORDER BY deadline NULLS LAST, requested_at, saga_id")
        with conn.cursor(row_factory=class_row(QueueRow)) as cur:
            return cur.execute(query, (tenant, tenant)).fetchall()


def is_repeated_action(
    state: SagaState,
    events: Sequence[SagaEvent],
    action: str,
    step_id: str | None,
    kind: StepKind,
) -> bool:
    """Whether this operator action was already recorded and nothing since asks again.

    A second click on the same button finds the saga no longer paused and the same action
    as the last operator action: it must record nothing. A new escalation after the first
    action makes the same action meaningful again.
    """
    if state.escalation is not None:
        return False
    last = next((e for e in reversed(events) if isinstance(e, OperatorAction)), None)
    if last is None:
        return False
    effective_kind = StepKind.COMPENSATION if action == "mark_compensated" else kind
    last_kind = StepKind.COMPENSATION if last.action == "mark_compensated" else last.kind
    return (last.action, last.step_id, last_kind) == (action, step_id, effective_kind)
