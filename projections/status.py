"""Projection status: the active and building table sets and how far each is behind."""

from __future__ import annotations

from dataclasses import dataclass

from events import Position
from projections.context import ProjectionContext
from projections.tables import PROJECTIONS, subscription_name, table_sets

_BEHIND = """
SELECT count(*), COALESCE(extract(epoch FROM now() - min(recorded_at)), 0)::float8
  FROM eventstore.events
 WHERE (transaction_id, global_position) > (%s::text::xid8, %s)
"""


@dataclass(frozen=True)
class TableSetStatus:
    """One table set's checkpoint and lag (events and seconds behind the head)."""

    name: str
    version: int
    status: str
    subscription: str
    checkpoint: str | None
    events_behind: int
    seconds_behind: float


@dataclass(frozen=True)
class ProjectionStatus:
    """A projection's active version and every live (active or building) table set."""

    name: str
    active_version: int | None
    table_sets: list[TableSetStatus]

    @property
    def lag(self) -> TableSetStatus | None:
        """The active table set's status."""
        return next((t for t in self.table_sets if t.version == self.active_version), None)


def lag_of(ctx: ProjectionContext, name: str, version: int) -> tuple[Position | None, int, float]:
    """(checkpoint, events behind, seconds the oldest unapplied event has waited)."""
    checkpoint = ctx.store.checkpoint(subscription_name(name, version))
    cursor = checkpoint or Position(0, 0)
    with ctx.connection() as conn:
        row = conn.execute(_BEHIND, (str(cursor.transaction_id), cursor.global_position)).fetchone()
    assert row is not None
    return checkpoint, int(row[0]), float(row[1])


def projection_status(ctx: ProjectionContext) -> list[ProjectionStatus]:
    """Every projection's table sets with checkpoints and lag."""
    with ctx.connection() as conn:
        sets = table_sets(conn)
        active = dict(conn.execute("SELECT name, version FROM projections.active_versions"))
    report: list[ProjectionStatus] = []
    for name in PROJECTIONS:
        live: list[TableSetStatus] = []
        for ts in sets:
            if ts.name != name or ts.status == "retired":
                continue
            checkpoint, behind, seconds = lag_of(ctx, name, ts.version)
            live.append(
                TableSetStatus(
                    name,
                    ts.version,
                    ts.status,
                    subscription_name(name, ts.version),
                    str(checkpoint) if checkpoint else None,
                    behind,
                    seconds if behind else 0.0,
                )
            )
        report.append(ProjectionStatus(name, active.get(name), live))
    return report
