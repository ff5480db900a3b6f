"""The platform's saga metrics over a recent window, for the Prometheus exporter.

A scrape asks "how are sagas doing lately", not "since the beginning of time": every rate,
share and latency here is over the last ``window`` seconds (``SAGAFLEET_METRICS_WINDOW_SECONDS``,
15 minutes by default), each query reading an index over that window
(``projections/migrations/0003``) or a set only live problems keep small (unfinished sagas,
duplicate effects). The time stamps compared are the events' own (``at``) against the
database clock.

* sagas **started** in the window: how many, and the share that ever needed a person
  (manual-intervention ratio);
* sagas **finished** in the window: how many per terminal state, the completion,
  compensation and partial-compensation ratios, and time from start to terminal state
  (median and 95th percentile);
* sagas **unfinished** now: how many, how many wait for an operator, and the age of the
  oldest one's last change (stuck age);
* operations (a step's forward or compensation run) **changed** in the window: started,
  attempts, the ambiguous-outcome, retry-amplification (attempts plus the sweeper's
  re-enqueues in the window, per operation started) and reconciliation-success ratios,
  failures, and per tool the latency from first start to success;
* **duplicate effects** ever (a counter: an operation with two receipts never stops being one).

A share whose denominator is empty is None (not 0): nothing finished is no evidence of a
0 % completion rate.

Saga figures are kept apart **per tenant and definition**: a definition's name is its
tenant's (two tenants may register "orders" with different content), so one series never
mixes two tenants' sagas, and the platform's monitoring can route each tenant's series. Tool
figures are per tool and kind: the tool catalogue is the fleet's, not a tenant's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from projections.context import ProjectionContext
from projections.tables import active_version, table

QUANTILES = (0.5, 0.95)

_STARTED = """
SELECT tenant, definition_name, count(*), count(*) FILTER (WHERE escalations > 0)
  FROM {summary} WHERE started_at >= now() - make_interval(secs => %(window)s)
 GROUP BY tenant, definition_name
"""

_FINISHED = """
SELECT tenant, definition_name, state, count(*) FROM {summary}
 WHERE finished_at >= now() - make_interval(secs => %(window)s)
 GROUP BY tenant, definition_name, state
"""

_TIME_TO_TERMINAL = """
SELECT tenant, definition_name,
       percentile_cont(%(quantiles)s::float8[]) WITHIN GROUP
           (ORDER BY extract(epoch FROM finished_at - started_at))
  FROM {summary} WHERE finished_at >= now() - make_interval(secs => %(window)s)
 GROUP BY tenant, definition_name
"""

_UNFINISHED = """
SELECT tenant, definition_name, count(*),
       count(*) FILTER (WHERE state = 'MANUAL_INTERVENTION'),
       GREATEST(max(extract(epoch FROM now() - updated_at)), 0)::float8
  FROM {summary} WHERE finished_at IS NULL
 GROUP BY tenant, definition_name
"""

# {group} is a fixed column list: per definition, or per tool and kind.
_OPERATIONS = """
SELECT {group},
       count(*) FILTER (WHERE r.starts > 0),
       COALESCE(sum(r.starts), 0),
       count(*) FILTER (WHERE r.ambiguous > 0),
       COALESCE(sum(r.reconciliations_found + r.reconciliations_absent), 0),
       COALESCE(sum(r.reconciliations_unknown), 0),
       count(*) FILTER (WHERE r.failures > 0),
       percentile_cont(%(quantiles)s::float8[]) WITHIN GROUP
           (ORDER BY extract(epoch FROM r.succeeded_at - r.first_started_at))
  FROM {steps} r JOIN {summary} s USING (saga_id)
 WHERE r.changed_at >= now() - make_interval(secs => %(window)s)
 GROUP BY {group}
"""

_DUPLICATES = """
SELECT {group}, count(*)
  FROM {steps} r JOIN {summary} s USING (saga_id)
 WHERE r.successes > 1 OR r.distinct_receipts > 1
 GROUP BY {group}
"""

_REDELIVERIES = """
SELECT {group}, count(*)
  FROM fleet.redeliveries d
  JOIN {summary} s ON s.saga_id = d.saga_id
  LEFT JOIN {steps} r ON r.saga_id = d.saga_id AND r.step_id = d.step_id AND r.kind = d.kind
 WHERE d.recorded_at >= now() - make_interval(secs => %(window)s)
 GROUP BY {group}
"""

BY_DEFINITION = ("s.tenant", "s.definition_name")
BY_TOOL = ("r.tool", "r.kind")


def share(part: float, whole: float) -> float | None:
    """``part / whole``, or None when ``whole`` is empty."""
    return part / whole if whole else None


@dataclass(frozen=True)
class OperationWindow:
    """Operations (of one definition, or of one tool and kind) changed in the window."""

    started: int = 0
    attempts: int = 0
    ambiguous: int = 0
    reconciled: int = 0
    reconciliations_unknown: int = 0
    failed: int = 0
    redeliveries: int = 0
    duplicate_effects_ever: int = 0
    latency_s: tuple[float | None, ...] = (None,) * len(QUANTILES)
    """First start to success, at each of :data:`QUANTILES` (None: nothing succeeded)."""

    @property
    def ambiguous_outcome_ratio(self) -> float | None:
        """Share of started operations that met an ambiguous outcome."""
        return share(self.ambiguous, self.started)

    @property
    def retry_amplification_ratio(self) -> float | None:
        """Attempts plus the sweeper's re-enqueues, per operation started (1.0: no retry)."""
        return share(self.attempts + self.redeliveries, self.started)

    @property
    def reconciliation_success_ratio(self) -> float | None:
        """Share of lookups that settled the outcome (found or absent)."""
        return share(self.reconciled, self.reconciled + self.reconciliations_unknown)


@dataclass(frozen=True)
class DefinitionWindow:
    """The sagas of one tenant's definition over the window (and those unfinished now)."""

    tenant: str
    definition: str
    started: int = 0
    escalated: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    time_to_terminal_s: tuple[float | None, ...] = (None,) * len(QUANTILES)
    unfinished: int = 0
    waiting_for_operator: int = 0
    stuck_age_s: float = 0.0
    operations: OperationWindow = OperationWindow()

    def finished_share(self, state: str) -> float | None:
        """Share of the sagas finished in the window that ended in ``state``."""
        return share(self.finished.get(state, 0), sum(self.finished.values()))

    @property
    def manual_intervention_ratio(self) -> float | None:
        """Share of the sagas started in the window that needed a person."""
        return share(self.escalated, self.started)


@dataclass(frozen=True)
class WindowMetrics:
    """Every definition's and every tool's metrics over the last ``window_s`` seconds."""

    window_s: float
    definitions: list[DefinitionWindow]
    tools: dict[tuple[str, str], OperationWindow]


def collect_window(ctx: ProjectionContext, window_s: float, name: str = "sagas") -> WindowMetrics:
    """The metrics over the last ``window_s`` seconds, every tenant's sagas (the platform's
    monitoring), in one consistent snapshot of the active table set."""
    if not window_s > 0:
        raise ValueError(f"the metrics window must be positive, not {window_s}")
    params = {"window": float(window_s), "quantiles": list(QUANTILES)}
    with ctx.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        version = active_version(conn, name)
        names = {"summary": table("saga_summary", version), "steps": table("step_runs", version)}

        def rows(template: str, group: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
            query = sql.SQL(template).format(
                group=sql.SQL(", ").join(sql.SQL(g) for g in group), **names)
            return conn.execute(query, params).fetchall()

        started = rows(_STARTED)
        finished = rows(_FINISHED)
        terminal = rows(_TIME_TO_TERMINAL)
        unfinished = rows(_UNFINISHED)
        operations = {g: _operations(len(g), rows(_OPERATIONS, g), rows(_DUPLICATES, g),
                                     _redeliveries(conn, rows, g))
                      for g in (BY_DEFINITION, BY_TOOL)}
    by_name: dict[tuple[str, str], dict[str, Any]] = {}

    def entry(tenant: str, definition: str) -> dict[str, Any]:
        return by_name.setdefault((tenant, definition), {
            "tenant": tenant, "definition": definition, "finished": {}})

    for tenant, definition, count, escalated in started:
        entry(tenant, definition).update(started=int(count), escalated=int(escalated))
    for tenant, definition, state, count in finished:
        entry(tenant, definition)["finished"][str(state)] = int(count)
    for tenant, definition, quantiles in terminal:
        entry(tenant, definition)["time_to_terminal_s"] = _quantiles(quantiles)
    for tenant, definition, count, waiting, age in unfinished:
        entry(tenant, definition).update(unfinished=int(count),
                                         waiting_for_operator=int(waiting),
                                         stuck_age_s=float(age or 0.0))
    for (tenant, definition), ops in operations[BY_DEFINITION].items():
        entry(tenant, definition)["operations"] = ops
    definitions = [DefinitionWindow(**values) for _, values in sorted(by_name.items())]
    tools = {(str(tool), str(kind)): ops
             for (tool, kind), ops in sorted(operations[BY_TOOL].items())}
    return WindowMetrics(float(window_s), definitions, tools)


def _quantiles(values: list[float | None] | None) -> tuple[float | None, ...]:
    """percentile_cont's array (NULL when nothing was measured) as one value per quantile."""
    return tuple(values) if values else (None,) * len(QUANTILES)


def _redeliveries(conn: psycopg.Connection[Any], rows: Any,
                  group: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The sweeper's re-enqueues in the window by group (none before fleet migrations)."""
    exists = conn.execute("SELECT to_regclass('fleet.redeliveries') IS NOT NULL").fetchone()
    return rows(_REDELIVERIES, group) if exists and exists[0] else []


def _operations(
    width: int, changed: list[tuple[Any, ...]], duplicates: list[tuple[Any, ...]],
    redeliveries: list[tuple[Any, ...]],
) -> dict[tuple[Any, ...], OperationWindow]:
    """One OperationWindow per group key (its first ``width`` columns), from the rows of
    the three queries."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in changed:
        started, attempts, ambiguous, reconciled, unknown, failed, latency = row[width:]
        found.setdefault(tuple(row[:width]), {}).update(
            started=int(started), attempts=int(attempts), ambiguous=int(ambiguous),
            reconciled=int(reconciled), reconciliations_unknown=int(unknown),
            failed=int(failed), latency_s=_quantiles(latency))
    for row in duplicates:
        found.setdefault(tuple(row[:-1]), {})["duplicate_effects_ever"] = int(row[-1])
    for row in redeliveries:
        key = tuple(row[:-1])
        if any(part is None for part in key):
            continue  # a re-enqueue of a saga's whole due work names no step, so no tool
        found.setdefault(key, {})["redeliveries"] = int(row[-1])
    return {key: OperationWindow(**values) for key, values in found.items()}
