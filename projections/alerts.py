"""Business-risk alerts, read from the active read model against the database clock.

The alerts name what is at risk, not what errored: money captured with no confirmed
reservation, a compensation that keeps failing, an irreversible action that ran without
its approval, ambiguous outcomes nobody has resolved.

Three are conditions that clear when the condition does (the capture is offset, the
compensation succeeds, the outcomes are resolved). An execution without approval is a fact
that never stops being true, so it is an incident-window alert: it fires while such an
execution started within the last ``approval_window_s`` seconds (the metrics window,
``SAGAFLEET_METRICS_WINDOW_SECONDS``, the same for the exporter, ``sagafleet alerts`` and
the console) and clears once it is older; the event stays in the log and in ``audit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final

from psycopg import sql

from events.definition_store.port import check_tenant
from projections.context import ProjectionContext
from projections.tables import active_version, table

# Every state but COMPLETED, COMPENSATED and COMMITTED_WITH_REPAIR, named, so that the state
# index finds the few sagas in them instead of reading every capture ever made (the
# Prometheus exporter asks at each scrape).
_UNCONFIRMED_CAPTURE = """
SELECT r.saga_id, s.definition_name, r.step_id, r.succeeded_at, s.state
  FROM {steps} r JOIN {summary} s USING (saga_id)
 WHERE r.kind = 'forward' AND r.semantics = 'offsettable'
   AND r.status IN ('succeeded', 'forced')
   AND s.state IN ('RUNNING', 'COMPENSATING', 'MANUAL_INTERVENTION', 'PARTIALLY_COMPENSATED')
   AND r.succeeded_at < now() - make_interval(secs => %(capture_s)s) AND {scope}
   AND NOT EXISTS (SELECT 1 FROM {steps} c
                    WHERE c.saga_id = r.saga_id AND c.step_id = r.step_id
                      AND c.kind = 'compensation' AND c.status IN ('succeeded', 'forced'))
 ORDER BY r.succeeded_at
"""

_FAILING_COMPENSATION = """
SELECT r.saga_id, s.definition_name, r.step_id, r.changed_at, r.failures + r.ambiguous
  FROM {steps} r JOIN {summary} s USING (saga_id)
 WHERE r.kind = 'compensation' AND r.failures + r.ambiguous >= %(failures)s AND {scope}
   AND r.status NOT IN ('succeeded', 'forced', 'skipped')
 ORDER BY r.changed_at
"""

# Read through the partial index on first_started_at WHERE started_without_approval
# (projections/migrations/0006): only the window's few rogue runs.
_UNAPPROVED = """
SELECT r.saga_id, s.definition_name, r.step_id, r.first_started_at, r.semantics
  FROM {steps} r JOIN {summary} s USING (saga_id)
 WHERE r.started_without_approval
   AND r.first_started_at >= now() - make_interval(secs => %(approval_window_s)s) AND {scope}
 ORDER BY r.first_started_at
"""

_AMBIGUOUS = """
SELECT r.saga_id, s.definition_name, r.step_id, r.changed_at, r.kind
  FROM {steps} r JOIN {summary} s USING (saga_id)
 WHERE r.status IN ('unknown', 'reconciling', 'found', 'absent') AND {scope}
 ORDER BY r.changed_at
"""


ALERT_KINDS: Final[Mapping[str, str]] = MappingProxyType({
    "captured_without_confirmation": "Money captured, the saga not finished, nothing offset it",
    "compensation_failing": "A compensation keeps failing",
    "executed_before_approval": "A step ran without a granted approval",
    "unresolved_ambiguous_outcomes": "Ambiguous outcomes nobody has resolved",
})
"""Every kind of alert this module raises, with what it means for a person (the console's
health page lists them all, firing or not)."""


@dataclass(frozen=True)
class AlertThresholds:
    """When a risk becomes an alert."""

    unconfirmed_capture_s: float = 900.0
    compensation_failures: int = 3
    unresolved_ambiguous: int = 5
    approval_window_s: float = 900.0
    """How long a step run without its approval keeps ``executed_before_approval`` firing:
    the metrics window (``SAGAFLEET_METRICS_WINDOW_SECONDS``), :meth:`for_window`."""

    def __post_init__(self) -> None:
        if not self.approval_window_s > 0:
            raise ValueError(
                f"the approval alert's window must be positive, not {self.approval_window_s}")

    @classmethod
    def for_window(cls, window_s: float) -> AlertThresholds:
        """The default thresholds, the approval alert over the metrics window ``window_s``."""
        return cls(approval_window_s=float(window_s))


@dataclass(frozen=True)
class Alert:
    """One business risk: what, how bad, which saga and step, since when."""

    kind: str
    severity: str
    message: str
    saga_id: str | None = None
    definition: str | None = None
    step_id: str | None = None
    since: datetime | None = None


def business_alerts(
    ctx: ProjectionContext, *, tenant: str, thresholds: AlertThresholds | None = None,
    name: str = "sagas",
) -> list[Alert]:
    """Every business-risk alert on ``tenant``'s sagas (never another tenant's) right now."""
    check_tenant(tenant)
    return _alerts(ctx, sql.SQL("s.tenant = %(tenant)s"), tenant, thresholds, name)


def saga_alerts(
    ctx: ProjectionContext, *, tenant: str, saga_id: str,
    thresholds: AlertThresholds | None = None, name: str = "sagas",
) -> list[Alert]:
    """The business-risk alerts on one of ``tenant``'s sagas right now (none for another
    tenant's): what the saga page shows as at risk."""
    check_tenant(tenant)
    scope = sql.SQL("s.tenant = %(tenant)s AND s.saga_id = %(saga_id)s")
    return _alerts(ctx, scope, tenant, thresholds, name, scope_params={"saga_id": saga_id})


def platform_alerts(
    ctx: ProjectionContext, thresholds: AlertThresholds | None = None, name: str = "sagas"
) -> list[Alert]:
    """Every business-risk alert over every tenant's sagas: the platform's own monitoring
    (the Prometheus exporter), never a tenant's view."""
    return _alerts(ctx, sql.SQL("true"), None, thresholds, name)


def _alerts(
    ctx: ProjectionContext, scope: sql.Composable, tenant: str | None,
    thresholds: AlertThresholds | None, name: str, *,
    scope_params: dict[str, Any] | None = None,
) -> list[Alert]:
    """The alerts on the sagas ``scope`` (a predicate over the summary ``s``, with
    ``scope_params``) admits."""
    limits = thresholds or AlertThresholds()
    params = {
        "capture_s": limits.unconfirmed_capture_s,
        "failures": limits.compensation_failures,
        "approval_window_s": limits.approval_window_s,
        "tenant": tenant,
        **(scope_params or {}),
    }
    alerts: list[Alert] = []
    with ctx.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        version = active_version(conn, name)
        names = {"steps": table("step_runs", version), "summary": table("saga_summary", version),
                 "scope": scope}

        def rows(template: str) -> list[tuple[Any, ...]]:
            return conn.execute(sql.SQL(template).format(**names), params).fetchall()

        for saga_id, definition, step, since, state in rows(_UNCONFIRMED_CAPTURE):
            alerts.append(
                Alert(
                    "captured_without_confirmation",
                    "critical",
                    f"{step} captured money but the saga is {state} and nothing offset it",
                    str(saga_id),
                    str(definition),
                    str(step),
                    since,
                )
            )
        for saga_id, definition, step, since, failures in rows(_FAILING_COMPENSATION):
            alerts.append(
                Alert(
                    "compensation_failing",
                    "critical",
                    f"compensation of {step} failed {failures} times",
                    str(saga_id),
                    str(definition),
                    str(step),
                    since,
                )
            )
        for saga_id, definition, step, since, semantics in rows(_UNAPPROVED):
            severity = "critical" if semantics == "irreversible" else "warning"
            alerts.append(
                Alert(
                    "executed_before_approval",
                    severity,
                    f"{semantics} step {step} started without a granted approval",
                    str(saga_id),
                    str(definition),
                    str(step),
                    since,
                )
            )
        ambiguous = rows(_AMBIGUOUS)
    if len(ambiguous) >= limits.unresolved_ambiguous:
        oldest = ambiguous[0]
        alerts.append(
            Alert(
                "unresolved_ambiguous_outcomes",
                "warning",
                f"{len(ambiguous)} operations have an unresolved ambiguous outcome",
                since=oldest[3],
            )
        )
    return alerts
