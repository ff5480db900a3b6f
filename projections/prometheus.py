"""The projector's Prometheus endpoint: a ``prometheus_client`` Collector over the read models.

Nothing is counted in memory here: at each scrape :class:`ReadModelCollector` asks the read
models (``projections.window``: the last ``window_s`` seconds, through indexes), the
projection status (lag) and the business alerts, and yields metric families;
``prometheus_client`` writes the exposition (``# HELP``/``# TYPE``, escaping, ``_total``).
Labels are bounded: ``tenant``, ``definition``, ``tool``, ``kind``, ``state``, ``quantile``,
``projection``, ``version``, ``status``, ``refusal``, ``alert`` — never a saga id.
docs/operations.md "Metrics" lists every name.

This is the platform's view, every tenant's at once: a saga family and the dead letters
carry a ``tenant`` label (a definition's name is its tenant's, so two tenants' series never
merge; ``tenant=""`` counts the letters no tenant is proven to own), and the endpoint answers
only to the fleet role (:mod:`sagafleet.metrics_access` guards it with a token). Tenants read
their own figures through ``sagafleet stats`` and the console's Health page.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    gc_collector,
    generate_latest,
    make_wsgi_app,
    platform_collector,
    process_collector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from projections.alerts import AlertThresholds, platform_alerts
from projections.context import ProjectionContext
from projections.metrics import DeadLetterMetrics, dead_letter_metrics
from projections.status import projection_status
from projections.window import QUANTILES, OperationWindow, WindowMetrics, collect_window
from saga_core.errors import SagaError

log = logging.getLogger(__name__)

DEFAULT_WINDOW_S = 900.0
ALERT_KINDS = (
    "captured_without_confirmation",
    "compensation_failing",
    "executed_before_approval",
    "unresolved_ambiguous_outcomes",
)
TERMINAL_STATES = ("COMPLETED", "COMPENSATED", "PARTIALLY_COMPENSATED", "COMMITTED_WITH_REPAIR")


def _gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"sagafleet_{name}", documentation, labels=list(labels))


def _add(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str],
         value: float | None) -> None:
    """Add one sample unless the value is unknown (an empty window's share)."""
    if value is not None:
        family.add_metric(labels, float(value))


class ReadModelCollector(Collector):
    """Yields the saga metrics of the last ``window_s`` seconds, projection lag, dead
    letters and business alerts, read at each scrape."""

    def __init__(self, ctx: ProjectionContext, window_s: float = DEFAULT_WINDOW_S) -> None:
        if not window_s > 0:
            raise ValueError(f"the metrics window must be positive, not {window_s}")
        self.ctx = ctx
        self.window_s = window_s

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not query the database."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Every family, from one read of each source (SagaError propagates: a failed scrape)."""
        window = collect_window(self.ctx, self.window_s)
        yield from _window_families(window)
        yield from _lag_families(self.ctx)
        yield from _replica_families(self.ctx)
        yield from _dead_letter_families(dead_letter_metrics(self.ctx))
        thresholds = AlertThresholds.for_window(self.window_s)
        alerts = Counter(a.kind for a in platform_alerts(self.ctx, thresholds))
        family = _gauge("business_alerts", "Business-risk alerts open now, by kind.", ["kind"])
        for kind in ALERT_KINDS:
            family.add_metric([kind], alerts.get(kind, 0))
        yield family


def _window_families(window: WindowMetrics) -> Iterator[Metric]:
    span = f"in the last {window.window_s:g} s"
    yield GaugeMetricFamily("sagafleet_metrics_window_seconds",
                            "The window the saga rates and latencies cover.",
                            value=window.window_s)
    d = ["tenant", "definition"]
    started = _gauge("sagas_started", f"Sagas started {span}.", d)
    finished = _gauge("sagas_finished", f"Sagas that reached a terminal state {span}.",
                      [*d, "state"])
    ratios = {
        "COMPLETED": _gauge("saga_completion_ratio", f"Share of sagas finished {span} "
                            "that completed.", d),
        "COMPENSATED": _gauge("saga_compensation_ratio", f"Share of sagas finished {span} "
                              "that were compensated.", d),
        "PARTIALLY_COMPENSATED": _gauge("saga_partial_compensation_ratio", "Share of sagas "
                                        f"finished {span} only partially compensated.", d),
    }
    manual = _gauge("saga_manual_intervention_ratio", f"Share of sagas started {span} "
                    "that needed a person (escalated at least once).", d)
    terminal = _gauge("saga_time_to_terminal_seconds", f"Start to terminal state of sagas "
                      f"finished {span}, at each quantile.", [*d, "quantile"])
    unfinished = _gauge("sagas_unfinished", "Sagas not in a terminal state now.", d)
    waiting = _gauge("sagas_waiting_for_operator", "Sagas in MANUAL_INTERVENTION now.", d)
    stuck = _gauge("saga_stuck_age_seconds", "Time since the least recently changed "
                   "unfinished saga last changed.", d)
    ops = _OperationFamilies("", d, span)
    for w in window.definitions:
        label = [w.tenant, w.definition]
        started.add_metric(label, w.started)
        for state in TERMINAL_STATES:
            finished.add_metric([*label, state], w.finished.get(state, 0))
        for state, family in ratios.items():
            _add(family, label, w.finished_share(state))
        _add(manual, label, w.manual_intervention_ratio)
        for q, value in zip(QUANTILES, w.time_to_terminal_s, strict=True):
            _add(terminal, [*label, f"{q:g}"], value)
        unfinished.add_metric(label, w.unfinished)
        waiting.add_metric(label, w.waiting_for_operator)
        stuck.add_metric(label, w.stuck_age_s)
        ops.add(label, w.operations)
    yield from (started, finished, *ratios.values(), manual, terminal, unfinished, waiting,
                stuck)
    yield from ops.families()
    tools = _OperationFamilies("tool_", ["tool", "kind"], span)
    latency = _gauge("tool_latency_seconds", f"First start to success of operations that "
                     f"succeeded {span}, at each quantile.", ["tool", "kind", "quantile"])
    for (tool, kind), operation in window.tools.items():
        tools.add([tool, kind], operation)
        for q, value in zip(QUANTILES, operation.latency_s, strict=True):
            _add(latency, [tool, kind, f"{q:g}"], value)
    yield from tools.families()
    yield latency


class _OperationFamilies:
    """The operation families of one grouping (per definition, or per tool and kind)."""

    def __init__(self, prefix: str, labels: list[str], span: str) -> None:
        self.started = _gauge(f"{prefix}operations_started",
                              f"Operations (step or compensation runs) started, changed {span}.",
                              labels)
        self.failed = _gauge(f"{prefix}operations_failed",
                             f"Operations with a failed attempt, changed {span}.", labels)
        self.redeliveries = _gauge(f"{prefix}sweeper_redeliveries",
                                   f"Step messages the sweeper re-enqueued {span}.", labels)
        self.ambiguous = _gauge(f"{prefix}ambiguous_outcome_ratio", "Share of operations "
                                f"changed {span} that met an ambiguous outcome.", labels)
        self.amplification = _gauge(f"{prefix}retry_amplification_ratio", "Attempts and "
                                    f"re-enqueues per operation started, changed {span}.",
                                    labels)
        self.reconciled = _gauge(f"{prefix}reconciliation_success_ratio", "Share of lookups "
                                 f"by key that settled the outcome, changed {span}.", labels)
        self.duplicates = CounterMetricFamily(
            f"sagafleet_{prefix}duplicate_effects", "Operations that ever recorded two "
            "successes or two different receipts (a duplicate effect).", labels=labels)

    def add(self, labels: list[str], operation: OperationWindow) -> None:
        """One group's samples."""
        self.started.add_metric(labels, operation.started)
        self.failed.add_metric(labels, operation.failed)
        self.redeliveries.add_metric(labels, operation.redeliveries)
        _add(self.ambiguous, labels, operation.ambiguous_outcome_ratio)
        _add(self.amplification, labels, operation.retry_amplification_ratio)
        _add(self.reconciled, labels, operation.reconciliation_success_ratio)
        self.duplicates.add_metric(labels, operation.duplicate_effects_ever)

    def families(self) -> tuple[Metric, ...]:
        """Every family of this grouping."""
        return (self.started, self.failed, self.redeliveries, self.ambiguous,
                self.amplification, self.reconciled, self.duplicates)


def _lag_families(ctx: ProjectionContext) -> Iterator[Metric]:
    where = ["projection", "version", "status"]
    events = _gauge("projection_lag_events", "Events in the log a table set has not applied.",
                    where)
    seconds = _gauge("projection_lag_seconds", "Age of the oldest event a table set has not "
                     "applied.", where)
    for status in projection_status(ctx):
        for ts in status.table_sets:
            labels = [ts.name, str(ts.version), ts.status]
            _add(events, labels, ts.events_behind)
            _add(seconds, labels, ts.seconds_behind)
    yield events
    yield seconds


def _replica_families(ctx: ProjectionContext) -> Iterator[Metric]:
    """The read replica's replay lag, where the projector follows the log on one: the
    projection lag above counts from what the replica shows, so this is the rest of it."""
    if ctx.log_reads is None:
        return
    lag = ctx.log_reads.replay_lag_seconds()
    if lag is not None:
        yield GaugeMetricFamily("sagafleet_read_replica_lag_seconds", "How far the read "
                                "replica's replay is behind what it received (0: caught up).",
                                value=lag)


UNKNOWN_TENANT_LABEL = ""
"""The ``tenant`` label of dead letters no tenant is proven to own (a tenant is never blank)."""


def _dead_letter_families(by_tenant: Mapping[str | None, DeadLetterMetrics]
                          ) -> Iterator[Metric]:
    recorded = CounterMetricFamily("sagafleet_dead_letters_recorded", "Messages ever kept as "
                                   "dead letters (they could never succeed), by tenant "
                                   "(\"\": none proven).", labels=["tenant"])
    still_open = GaugeMetricFamily("sagafleet_dead_letters_open", "Dead letters waiting for an "
                                   "operator to requeue or discard them, by tenant.",
                                   labels=["tenant"])
    refused = CounterMetricFamily("sagafleet_commands_refused", "Signed agent commands "
                                  "refused, by tenant and refusal.", labels=["tenant", "refusal"])
    # The unknown tenant's series is always there (0 when none), so the families are too.
    every = {None: DeadLetterMetrics(), **by_tenant}
    for tenant, letters in sorted(every.items(), key=lambda item: item[0] or ""):
        label = tenant if tenant is not None else UNKNOWN_TENANT_LABEL
        recorded.add_metric([label], letters.recorded)
        still_open.add_metric([label], letters.open)
        for refusal, count in sorted(letters.refused.items()):
            refused.add_metric([label, refusal], count)
    yield recorded
    yield still_open
    yield refused


def exporter_registry(ctx: ProjectionContext, window_s: float = DEFAULT_WINDOW_S
                      ) -> CollectorRegistry:
    """A registry of the read-model collector and the serving process's own metrics
    (``process_*``, ``python_*``: the projector's memory and CPU)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReadModelCollector(ctx, window_s))
    process_collector.ProcessCollector(registry=registry)
    platform_collector.PlatformCollector(registry=registry)
    gc_collector.GCCollector(registry=registry)
    return registry


def scrape(ctx: ProjectionContext, window_s: float = DEFAULT_WINDOW_S) -> str:
    """One scrape's exposition text, as the endpoint serves it."""
    return generate_latest(exporter_registry(ctx, window_s)).decode()


def _unavailable_as_503(app: Callable[..., Any]) -> Callable[..., Any]:
    """A database that cannot answer is a 503 naming why (Prometheus marks the target down)."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        try:
            return app(environ, start_response)
        except SagaError as exc:
            body = f"metrics unavailable: {exc}\n".encode()
            start_response("503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
            return [body]

    return guarded


def exporter_app(ctx: ProjectionContext, window_s: float = DEFAULT_WINDOW_S
                 ) -> Callable[..., Any]:
    """The WSGI app of ``GET /metrics`` over the read-model collector (a database that cannot
    answer is a 503). It guards nothing: the composition root serves it only behind the
    fleet role's token (:mod:`sagafleet.metrics_http`)."""
    return _unavailable_as_503(make_wsgi_app(exporter_registry(ctx, window_s)))
