"""Saga metrics per definition and per tool, computed from the active read model.

Rates are over the sagas or operations they can apply to (a completion rate over finished
sagas, an ambiguous-outcome rate over operations that started). Retry amplification adds
the sweeper's re-enqueues from ``fleet.redeliveries`` when that table exists; the dead
letters (agent commands that could never succeed) are counted from ``fleet.dead_letters``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from events.definition_store.port import check_tenant
from projections.context import ProjectionContext
from projections.tables import active_version, table

TERMINAL = ("COMPLETED", "COMPENSATED", "PARTIALLY_COMPENSATED", "COMMITTED_WITH_REPAIR")
_DONE_RUNS = ("succeeded", "forced", "skipped")

_PER_DEFINITION = """
SELECT definition_name,
       count(*),
       count(*) FILTER (WHERE state = ANY(%(terminal)s)),
       count(*) FILTER (WHERE state = 'COMPLETED'),
       count(*) FILTER (WHERE state = 'COMPENSATED'),
       count(*) FILTER (WHERE state = 'PARTIALLY_COMPENSATED'),
       count(*) FILTER (WHERE escalations > 0),
       count(*) FILTER (WHERE state = 'MANUAL_INTERVENTION'),
       COALESCE(max(extract(epoch FROM now() - updated_at))
                FILTER (WHERE NOT state = ANY(%(terminal)s)), 0)::float8,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))
           FILTER (WHERE state = ANY(%(terminal)s)),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))
           FILTER (WHERE state = ANY(%(terminal)s))
  FROM {summary} s WHERE {scope} GROUP BY definition_name
"""

# Per group of operations ({group} is a fixed column list): counts, counters and latencies.
_PER_OPERATIONS = """
SELECT {group},
       count(*) FILTER (WHERE r.starts > 0),
       COALESCE(sum(r.starts), 0),
       count(*) FILTER (WHERE r.ambiguous > 0),
       COALESCE(sum(r.reconciliations_found + r.reconciliations_absent), 0),
       COALESCE(sum(r.reconciliations_unknown), 0),
       count(*) FILTER (WHERE r.successes > 1 OR r.distinct_receipts > 1),
       count(*) FILTER (WHERE r.failures > 0),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.succeeded_at
           - r.first_started_at)) FILTER (WHERE r.kind = 'forward'),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM r.succeeded_at
           - r.first_started_at)) FILTER (WHERE r.kind = 'forward'),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.succeeded_at
           - r.first_started_at)) FILTER (WHERE r.kind = 'compensation'),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM r.succeeded_at
           - r.first_started_at)) FILTER (WHERE r.kind = 'compensation')
  FROM {steps} r JOIN {summary} s USING (saga_id)
 WHERE {scope}
 GROUP BY {group}
"""

# Before fleet migration 0003 there is no status column: every letter then counts as open;
# before 0013 no tenant column, and no letter is proven to be any tenant's.
_DEAD_LETTERS = """
SELECT {tenant}, count(*), count(*) FILTER (WHERE {open}),
       count(*) FILTER (WHERE {refused} IS NOT NULL), {refused}
  FROM fleet.dead_letters GROUP BY 1, {refused}
"""

_REDELIVERIES = """
SELECT {group}, count(*)
  FROM fleet.redeliveries d
  JOIN {summary} s ON s.saga_id = d.saga_id
  LEFT JOIN {steps} r ON r.saga_id = d.saga_id AND r.step_id = d.step_id AND r.kind = d.kind
 WHERE {scope}
 GROUP BY {group}
"""


def _rate(part: float, whole: float) -> float:
    return round(part / whole, 6) if whole else 0.0


@dataclass(frozen=True)
class OperationMetrics:
    """Counters and latencies of a group of operations (a definition's, or a tool's)."""

    operations_started: int = 0
    attempts: int = 0
    redeliveries: int = 0
    ambiguous_outcome_rate: float = 0.0
    reconciliation_success_rate: float = 0.0
    duplicate_effect_incidents: int = 0
    failed_operations: int = 0
    retry_amplification: float = 0.0
    forward_latency_p50_s: float | None = None
    forward_latency_p95_s: float | None = None
    compensation_latency_p50_s: float | None = None
    compensation_latency_p95_s: float | None = None


@dataclass(frozen=True)
class DefinitionMetrics:
    """The saga metrics of one definition."""

    definition: str
    sagas: int
    finished: int
    completion_rate: float
    compensation_rate: float
    partial_compensation_rate: float
    manual_intervention_rate: float
    waiting_for_operator: int
    stuck_saga_max_age_s: float
    # Time from start to a terminal state, over every terminal state (COMPLETED,
    # COMPENSATED, PARTIALLY_COMPENSATED, COMMITTED_WITH_REPAIR): each ends the invariant's
    # exposure, however it was restored.
    invariant_restore_p50_s: float | None
    invariant_restore_p95_s: float | None
    operations: OperationMetrics


@dataclass(frozen=True)
class ToolMetrics:
    """The metrics of one tool (forward and compensation calls apart)."""

    tool: str
    kind: str
    operations: OperationMetrics


@dataclass(frozen=True)
class DeadLetterMetrics:
    """Messages that could never succeed: recorded ever (a counter: rows are never deleted)
    and still open (a gauge: waiting for an operator to requeue or discard them)."""

    recorded: int = 0
    open: int = 0
    refused: Mapping[str, int] = field(default_factory=dict)
    """Signed agent commands refused, by refusal (unsigned, bad_signature, replayed, ...)."""


@dataclass(frozen=True)
class Metrics:
    """Everything ``sagafleet stats`` shows: one tenant's sagas and dead letters
    (``tenant``), or every tenant's for the platform's own monitoring (``tenant`` None),
    whose dead letters count those of unknown tenant too."""

    version: int
    definitions: list[DefinitionMetrics]
    tools: list[ToolMetrics]
    dead_letters: DeadLetterMetrics | None = DeadLetterMetrics()
    tenant: str | None = None


def _operations(row: tuple[Any, ...], redeliveries: int) -> OperationMetrics:
    started, attempts, ambiguous, rec_ok, rec_unknown, dupes, failed = row[:7]
    return OperationMetrics(
        operations_started=int(started),
        attempts=int(attempts),
        redeliveries=redeliveries,
        ambiguous_outcome_rate=_rate(ambiguous, started),
        reconciliation_success_rate=_rate(rec_ok, rec_ok + rec_unknown),
        duplicate_effect_incidents=int(dupes),
        failed_operations=int(failed),
        retry_amplification=_rate(int(attempts) + redeliveries, started),
        forward_latency_p50_s=row[7],
        forward_latency_p95_s=row[8],
        compensation_latency_p50_s=row[9],
        compensation_latency_p95_s=row[10],
    )


@dataclass(frozen=True)
class _Scope:
    """Which sagas a collection covers: a predicate over the summary ``s`` and its value."""

    where: sql.Composable
    tenant: str | None


def _grouped(
    conn: psycopg.Connection[Any], template: str, group: list[str], version: int, scope: _Scope
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    query = sql.SQL(template).format(
        group=sql.SQL(", ").join(sql.SQL(g) for g in group),
        steps=table("step_runs", version),
        summary=table("saga_summary", version),
        scope=scope.where,
    )
    width = len(group)
    return {tuple(row[:width]): tuple(row[width:])
            for row in conn.execute(query, {"tenant": scope.tenant})}


def collect_metrics(ctx: ProjectionContext, *, tenant: str, name: str = "sagas") -> Metrics:
    """Every metric of ``tenant``'s sagas and dead letters (never another tenant's, nor a
    letter of unknown tenant) from the active table set, in one consistent snapshot."""
    check_tenant(tenant)
    return _collect(ctx, _Scope(sql.SQL("s.tenant = %(tenant)s"), tenant), name)


def collect_platform_metrics(ctx: ProjectionContext, name: str = "sagas") -> Metrics:
    """Every metric over every tenant's sagas, dead letters included: the platform's own
    monitoring (the Prometheus exporter), never a tenant's view."""
    return _collect(ctx, _Scope(sql.SQL("true"), None), name)


def _collect(ctx: ProjectionContext, scope: _Scope, name: str) -> Metrics:
    """Compute every metric of the sagas in ``scope`` (one consistent snapshot)."""
    with ctx.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        version = active_version(conn, name)
        redeliveries_exist = conn.execute(
            "SELECT to_regclass('fleet.redeliveries') IS NOT NULL"
        ).fetchone()
        has_redeliveries = bool(redeliveries_exist and redeliveries_exist[0])
        query = sql.SQL(_PER_DEFINITION).format(summary=table("saga_summary", version),
                                                scope=scope.where)
        per_definition = conn.execute(
            query, {"terminal": list(TERMINAL), "tenant": scope.tenant}).fetchall()
        by_definition = _grouped(conn, _PER_OPERATIONS, ["s.definition_name"], version, scope)
        by_tool = _grouped(conn, _PER_OPERATIONS, ["r.tool", "r.kind"], version, scope)
        by_tenant = dead_letters_by_tenant(conn)
        dead_letters = (_sum(by_tenant.values()) if scope.tenant is None
                        else by_tenant.get(scope.tenant, DeadLetterMetrics()))
        redelivered_def: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        redelivered_tool: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        if has_redeliveries:
            redelivered_def = _grouped(conn, _REDELIVERIES, ["s.definition_name"], version,
                                       scope)
            redelivered_tool = _grouped(conn, _REDELIVERIES, ["r.tool", "r.kind"], version,
                                        scope)
    definitions = []
    for row in per_definition:
        name_, sagas, finished, completed, compensated, partial, escalated, waiting = row[:8]
        ops = by_definition.get((name_,), (0,) * 7 + (None,) * 4)
        redelivered = int(redelivered_def.get((name_,), (0,))[0])
        definitions.append(
            DefinitionMetrics(
                definition=name_,
                sagas=sagas,
                finished=finished,
                completion_rate=_rate(completed, finished),
                compensation_rate=_rate(compensated, finished),
                partial_compensation_rate=_rate(partial, finished),
                manual_intervention_rate=_rate(escalated, sagas),
                waiting_for_operator=waiting,
                stuck_saga_max_age_s=row[8],
                invariant_restore_p50_s=row[9],
                invariant_restore_p95_s=row[10],
                operations=_operations(ops, redelivered),
            )
        )
    tools = [
        ToolMetrics(
            tool=key[0],
            kind=key[1],
            operations=_operations(ops, int(redelivered_tool.get(key, (0,))[0])),
        )
        for key, ops in sorted(by_tool.items())
    ]
    return Metrics(version, definitions, tools, dead_letters, scope.tenant)


def dead_letter_metrics(ctx: ProjectionContext) -> dict[str | None, DeadLetterMetrics]:
    """The platform's dead-letter counts alone, per tenant (None: the letters no tenant is
    proven to own) — the exporter's: no saga query."""
    with ctx.connection() as conn:
        return dead_letters_by_tenant(conn)


def dead_letters_by_tenant(conn: psycopg.Connection[Any]) -> dict[str | None, DeadLetterMetrics]:
    """Each tenant's dead-letter counts (None: unknown tenant; absent: none recorded)."""
    columns = {name for (name,) in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass('fleet.dead_letters')"
        " AND attnum > 0 AND NOT attisdropped")}
    if not columns:
        return {}
    query = sql.SQL(_DEAD_LETTERS).format(
        tenant=sql.SQL("tenant" if "tenant" in columns else "NULL::text"),
        open=sql.SQL("status = 'open'" if "status" in columns else "true"),
        # fleet migration 0006: why a signed command was refused
        refused=sql.SQL("refusal" if "refusal" in columns else "NULL::text"))
    counts: dict[str | None, list[Any]] = {}
    for tenant, recorded, still_open, refused, refusal in conn.execute(query):
        entry = counts.setdefault(tenant, [0, 0, {}])
        entry[0] += int(recorded)
        entry[1] += int(still_open)
        if refusal is not None:
            entry[2][str(refusal)] = int(refused)
    return {tenant: DeadLetterMetrics(recorded=recorded, open=still_open,
                                      refused=dict(sorted(refused.items())))
            for tenant, (recorded, still_open, refused) in counts.items()}


def _sum(parts: Iterable[DeadLetterMetrics]) -> DeadLetterMetrics:
    """Several tenants' counts as one (the platform's whole)."""
    recorded = still_open = 0
    refused: Counter[str] = Counter()
    for part in parts:
        recorded += part.recorded
        still_open += part.open
        refused.update(part.refused)
    return DeadLetterMetrics(recorded=recorded, open=still_open,
                             refused=dict(sorted(refused.items())))
