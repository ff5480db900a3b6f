"""Table sets: names from a fixed allowlist, versions, and which set is active.

Table names are never built from user text: a table is one of :data:`TABLES` plus an
integer version, composed with ``psycopg.sql.Identifier``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import psycopg
from psycopg import sql

from projections.errors import UnknownProjection

SCHEMA: Final = "projections"
"""The schema every read model lives in."""

PROJECTIONS: Final = ("sagas",)
"""Every projection the projector runs (each has its own checkpoint and table set)."""

TABLES: Final = ("saga_summary", "step_runs", "operator_queue")
"""The tables of one table set of the ``sagas`` projection."""


def check_projection(name: str) -> str:
    """``name`` if it is a known projection; UnknownProjection otherwise."""
    if name not in PROJECTIONS:
        raise UnknownProjection(f"no projection {name!r}; known: {', '.join(PROJECTIONS)}")
    return name


def table(base: str, version: int) -> sql.Identifier:
    """The qualified identifier of one table of a table set."""
    if base not in TABLES:
        raise UnknownProjection(f"no read-model table {base!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UnknownProjection(f"table-set version must be a positive int, not {version!r}")
    return sql.Identifier(SCHEMA, f"{base}_v{version}")


def subscription_name(name: str, version: int) -> str:
    """The event-store subscription (checkpoint) of one table set of a projection."""
    return f"projections.{check_projection(name)}.v{version}"


@dataclass(frozen=True)
class TableSet:
    """One version of a projection's tables and where it stands."""

    name: str
    version: int
    status: str
    created_at: datetime
    switched_at: datetime | None


def active_version(conn: psycopg.Connection[Any], name: str, *, lock: bool = False) -> int:
    """The active table-set version of ``name`` (``lock``: hold it until this transaction ends)."""
    query = "SELECT version FROM projections.active_versions WHERE name = %s"
    if lock:
        # A shared row lock: a rebuild's switch (an UPDATE) waits for this transaction, so a
        # runner never writes a table set that has been switched away and dropped meanwhile.
        query += " FOR SHARE"
    row = conn.execute(query, (check_projection(name),)).fetchone()
    if row is None:
        raise UnknownProjection(f"projection {name!r} has no active table set; run db migrate")
    return int(row[0])


def table_sets(conn: psycopg.Connection[Any]) -> list[TableSet]:
    """Every table set ever created, by projection and version."""
    rows = conn.execute(
        "SELECT name, version, status, created_at, switched_at FROM projections.table_sets"
        " ORDER BY name, version"
    ).fetchall()
    return [TableSet(*row) for row in rows]
