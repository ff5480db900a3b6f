"""``/health``: the tenant's saga metrics and alerts as charts over time; ``/healthz``: liveness.

The charts (inline SVG, :mod:`sagafleet.console.charts`) read one bucket per bar from
:func:`projections.trends.collect_trends` (the read model's sagas by start and finish time:
throughput, compensation rate, manual-intervention rate, time to terminal, retry
amplification) and the samples :class:`~sagafleet.console.health_history.HealthHistory` keeps
of what has no history in the read model (projection lag, alerts firing). Below them, the
business alerts of the tenant now (:func:`projections.business_alerts`), each kind firing or
clear. The whole body is a live fragment (``/health/fragment``), refreshed when the read
models move.

``/healthz`` is the process's liveness probe for a load balancer or an orchestrator: public
(no session), plain text, and it touches no database (restarting the console would not mend
PostgreSQL; the health page shows what is wrong with the fleet).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from projections import business_alerts, operator_queue
from projections.alerts import ALERT_KINDS, Alert
from projections.status import projection_status
from projections.trends import DEFAULT_WINDOW, WINDOWS, TrendBucket, Trends, collect_trends
from sagafleet.console.charts import Point, Series, bar_chart, line_chart
from sagafleet.console.core import Console
from sagafleet.console.gate import viewer_of
from sagafleet.console.health_history import HealthHistory, HealthSample
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import Markup, html, join, url_part
from sagafleet.console.sessions import Viewer

NAV = NavLink(30, "Health", "/health")

STYLESHEET = Markup('<link rel="stylesheet" href="/static/health.css">')
"""The health pages' own styles (a same-origin stylesheet: the CSP allows it in the body)."""


def _percent(value: float) -> str:
    return f"{value * 100:.0f}%" if value >= 0.1 or value == 0 else f"{value * 100:.1f}%"


def _per_minute(value: float) -> str:
    return f"{value:.2f}/min" if value < 10 else f"{value:.0f}/min"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _times(value: float) -> str:
    return f"{value:.2f}×"


def _count(value: float) -> str:
    return f"{value:g}"  # an axis tick may fall between whole counts (0.5)


def _window_of(request: Request) -> str:
    """The ``window`` query parameter, if it names a window; the default otherwise."""
    asked = request.query_params.get("window", DEFAULT_WINDOW)
    return asked if asked in WINDOWS else DEFAULT_WINDOW


def _bars(title: str, trends: Trends, measure: Callable[[TrendBucket], float | None],
          describe: Callable[[float], str], css: str) -> Markup:
    span = trends.window
    points = [Point(b.start, measure(b)) for b in trends.buckets]
    return bar_chart(title, points, start=span.start, end=span.end, bucket_s=span.bucket_s,
                     describe=describe, css=css)


def _time_to_terminal(trends: Trends) -> Markup:
    span = trends.window
    half = span.bucket_s / 2

    def at(bucket: TrendBucket) -> datetime:
        return bucket.start + timedelta(seconds=half)

    series = [
        Series("p50", [Point(at(b), b.time_to_terminal_p50_s) for b in trends.buckets], "s1"),
        Series("p95", [Point(at(b), b.time_to_terminal_p95_s) for b in trends.buckets], "s2"),
    ]
    return line_chart("Time to terminal state (sagas finished in each bucket)", series,
                      start=span.start, end=span.end, describe=_duration,
                      css="time-to-terminal")


def _sampled(trends: Trends, samples: Sequence[HealthSample]) -> Markup:
    span = trends.window
    lag = line_chart(
        "Projection lag (oldest event not yet in the read models; sampled by this console)",
        [Series("lag", [Point(s.at, s.lag_s) for s in samples], "s3")],
        start=span.start, end=span.end, describe=_duration, css="projection-lag")
    alerts = line_chart(
        "Business alerts firing (sampled by this console)",
        [Series("alerts", [Point(s.at, float(s.alerts)) for s in samples], "s4")],
        start=span.start, end=span.end, describe=_count, css="alerts-firing")
    return join([lag, alerts])


def _charts(trends: Trends, samples: Sequence[HealthSample]) -> Markup:
    return html(
        '<div class="charts">{}{}{}{}{}{}</div>',
        _bars("Throughput (sagas reaching a terminal state)", trends,
              lambda b: b.throughput_per_min if b.finished else None, _per_minute,
              "throughput"),
        _bars("Compensation rate (compensated / finished)", trends,
              lambda b: b.compensation_rate, _percent, "compensation-rate"),
        _bars("Manual-intervention rate (escalated / started)", trends,
              lambda b: b.manual_intervention_rate, _percent, "manual-intervention-rate"),
        _time_to_terminal(trends),
        _bars("Retry amplification ((attempts + redeliveries) / operations)", trends,
              lambda b: b.retry_amplification, _times, "retry-amplification"),
        _sampled(trends, samples))


def _alerts_section(alerts: Sequence[Alert]) -> Markup:
    firing = {kind: [a for a in alerts if a.kind == kind] for kind in ALERT_KINDS}
    states = join(
        html('<tr class="alert-state {}" data-kind="{}"><td>{}</td><td><code>{}</code></td>'
             '<td><span class="badge {}">{}</span></td></tr>',
             "firing" if firing[kind] else "clear", kind, meaning, kind,
             "urgent" if firing[kind] else "ok",
             f"firing ({len(firing[kind])})" if firing[kind] else "clear")
        for kind, meaning in ALERT_KINDS.items())
    rows = join(
        html('<tr class="alert {}"><td><span class="badge {}">{}</span></td><td>{}</td>'
             '<td>{}</td><td>{}</td><td>{}</td></tr>',
             a.severity, "urgent" if a.severity == "critical" else "", a.severity, a.message,
             html('<a href="/sagas/{}">{}</a>', url_part(a.saga_id), a.saga_id)
             if a.saga_id else "—",
             a.step_id or "—", f"{a.since:%Y-%m-%d %H:%M:%S}" if a.since else "—")
        for a in alerts)
    details = (html('<table class="alerts"><thead><tr><th>severity</th><th>what</th>'
                    '<th>saga</th><th>step</th><th>since</th></tr></thead><tbody>{}</tbody>'
                    '</table>', rows) if alerts else
               html('<p class="notice ok">No business alert is firing.</p>'))
    return html('<section class="alerts-now"><h2>Alerts now</h2>'
                '<table class="alert-states"><thead><tr><th>alert</th><th>kind</th>'
                '<th>state</th></tr></thead><tbody>{}</tbody></table>{}</section>',
                states, details)


def _lag_now(console: Console) -> float | None:
    for status in projection_status(console.read):
        if status.name == "sagas" and status.lag is not None:
            return status.lag.seconds_behind
    return None


GLANCE_QUEUE_ROWS = 100
"""The queue is counted up to this many entries ("100+" beyond: the queue page pages them)."""


def _glance(console: Console, viewer: Viewer) -> Markup:
    """How many requests wait for a person and how many of the viewer's dead letters are
    open (its tenant's; to the fleet role, those of unknown tenant too), linked."""
    waiting = len(operator_queue(console.read, tenant=viewer.tenant,
                                 limit=GLANCE_QUEUE_ROWS + 1))
    shown = f"{GLANCE_QUEUE_ROWS}+" if waiting > GLANCE_QUEUE_ROWS else str(waiting)
    letters = console.fleet.dead_letters.open_count(viewer.principal)
    return html('<ul class="glance"><li><a href="/queue"><strong>{}</strong> waiting for a '
                'person</a></li><li><a href="/dead-letters"><strong>{}</strong> open dead '
                'letter(s)</a></li><li><a href="/workers">the workers</a></li>'
                '</ul>', shown, letters)


def _window_links(current: str) -> Markup:
    return join(
        html('<a href="/health?window={}"{}>{}</a>', name,
             Markup(' class="current" aria-current="true"') if name == current else "", name)
        for name in WINDOWS)


def routes(console: Console) -> list[BaseRoute]:
    """The health page, its live fragment, and the liveness probe."""
    history = HealthHistory()

    def body(request: Request) -> Markup:
        viewer = viewer_of(request)
        window = _window_of(request)
        trends = collect_trends(console.read, tenant=viewer.tenant, window=window)
        alerts = business_alerts(console.read, tenant=viewer.tenant,
                                 thresholds=console.alert_thresholds)
        history.record(viewer.tenant, HealthSample(trends.as_of, _lag_now(console),
                                                   len(alerts)))
        samples = history.since(viewer.tenant, trends.window.start)
        return html('<p class="muted as-of">as of {} · {} buckets of {} · tenant {}</p>{}{}{}',
                    f"{trends.as_of:%Y-%m-%d %H:%M:%S %Z}", trends.window.buckets,
                    _duration(trends.window.bucket_s), viewer.tenant,
                    _glance(console, viewer), _alerts_section(alerts),
                    _charts(trends, samples))

    def health_page(request: Request) -> Response:
        window = _window_of(request)
        page = html(
            '{}<div class="health-head"><h1>Health</h1><nav class="windows">{}</nav>'
            '<span class="live-status"></span></div>'
            '<div id="health" data-live="/health/fragment?window={}">{}</div>',
            STYLESHEET, _window_links(window), window, body(request))
        return console.page(request, "Health", page, current="/health")

    def health_fragment(request: Request) -> Response:
        return console.fragment(body(request))

    def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    return [Route("/health", health_page, methods=["GET"]),
            Route("/health/fragment", health_fragment, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET", "HEAD"])]
