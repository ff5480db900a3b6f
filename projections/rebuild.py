"""Blue/green rebuild: a new table set catches up under its own checkpoint, then takes over.

The system keeps running meanwhile: the live projector goes on writing the active set,
readers read it, and the rebuild's last batch switches ``projections.active_versions`` in
the same transaction that applies it. The live projector notices the switch at its next
batch and follows the new set; the old set is then dropped.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from projections.bulk import fold_parts
from projections.context import ProjectionContext
from projections.errors import RebuildConflict
from projections.runner import ProjectionRunner
from projections.status import lag_of
from projections.tables import active_version, check_projection, subscription_name


@dataclass(frozen=True)
class RebuildProgress:
    """Where a rebuild stands after a batch."""

    name: str
    version: int
    events_applied: int
    events_behind: int
    elapsed_s: float


@dataclass(frozen=True)
class RebuildReport:
    """What a finished rebuild did."""

    name: str
    old_version: int
    new_version: int
    events_applied: int
    elapsed_s: float

    @property
    def events_per_s(self) -> float:
        """Rebuild speed."""
        return self.events_applied / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _lock_key(name: str) -> int:
    digest = hashlib.sha256(f"projections.rebuild:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _start_table_set(conn: psycopg.Connection[Any], name: str) -> int:
    with conn.transaction():
        # A building set left by a crashed rebuild is stale: nobody holds the rebuild lock.
        for (stale,) in conn.execute(
            "SELECT version FROM projections.table_sets WHERE name = %s AND status = 'building'",
            (name,),
        ).fetchall():
            conn.execute("SELECT projections.drop_table_set(%s)", (stale,))
            conn.execute(
                "UPDATE projections.table_sets SET status = 'retired'"
                " WHERE name = %s AND version = %s",
                (name, stale),
            )
        row = conn.execute(
            "SELECT COALESCE(max(version), 0) + 1 FROM projections.table_sets WHERE name = %s",
            (name,),
        ).fetchone()
        assert row is not None
        version = int(row[0])
        conn.execute("SELECT projections.create_table_set(%s)", (version,))
        conn.execute(
            "INSERT INTO projections.table_sets (name, version, status)"
            " VALUES (%s, %s, 'building')",
            (name, version),
        )
    return version


def rebuild(
    ctx: ProjectionContext,
    name: str = "sagas",
    *,
    batch_size: int = 2000,
    progress: Callable[[RebuildProgress], None] | None = None,
    progress_every_s: float = 1.0,
    drop_old: bool = True,
    workers: int = 1,
) -> RebuildReport:
    """Build a new table set of ``name`` from the whole log, switch to it, drop the old one.

    With ``workers`` > 1 the log up to the current horizon is first folded by that many
    processes in parallel (:mod:`projections.bulk`); the checkpointed runner then applies
    the rest, catches up with the live log and switches, as it does alone.
    """
    if workers < 1:
        raise ValueError("workers must be at least 1")
    check_projection(name)
    with psycopg.connect(ctx.store.conninfo, autocommit=True) as lock_conn:
        got = lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (_lock_key(name),)).fetchone()
        if not (got and got[0]):
            raise RebuildConflict(f"a rebuild of {name!r} is already running")
        old = active_version(lock_conn, name)
        version = _start_table_set(lock_conn, name)
        started = time.perf_counter()
        applied = 0
        if workers > 1:
            # The bulk phase: everything up to the horizon, in parallel, then the runner
            # resumes from the horizon (later events already folded are duplicates to it).
            after = ctx.store.horizon()
            if after is not None:
                applied = fold_parts(ctx.store.conninfo, version, workers)
                ctx.store.subscription(subscription_name(name, version)).start_at(after)
                if progress is not None:
                    behind = lag_of(ctx, name, version)[1]
                    progress(RebuildProgress(name, version, applied, behind,
                                             time.perf_counter() - started))
        runner = ProjectionRunner(ctx, name, version=version, batch_size=batch_size)
        last_report = started
        try:
            while True:
                report = runner.run_once(switch_when_caught_up=True)
                applied += report.applied
                now = time.perf_counter()
                if progress is not None and (
                    report.switched or now - last_report >= progress_every_s
                ):
                    last_report = now
                    behind = 0 if report.switched else lag_of(ctx, name, version)[1]
                    progress(RebuildProgress(name, version, applied, behind, now - started))
                if report.switched:
                    break
        finally:
            runner.close()
        elapsed = time.perf_counter() - started
        if drop_old:
            lock_conn.execute("SELECT projections.drop_table_set(%s)", (old,))
        lock_conn.execute("SELECT pg_advisory_unlock(%s)", (_lock_key(name),))
    return RebuildReport(name, old, version, applied, elapsed)
