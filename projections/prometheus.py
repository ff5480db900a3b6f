"""A Prometheus text endpoint over the metrics, lag and alerts (stdlib ``http.server``)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from projections.alerts import platform_alerts
from projections.context import ProjectionContext
from projections.metrics import Metrics, OperationMetrics, collect_platform_metrics
from projections.status import ProjectionStatus, projection_status
from saga_core.errors import SagaError

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line(name: str, labels: dict[str, object], value: float | int | None) -> str | None:
    if value is None:
        return None
    rendered = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
    return f"sagafleet_{name}{{{rendered}}} {float(value)!r}"


def _operation_lines(prefix: str, labels: dict[str, object], ops: OperationMetrics) -> list[str]:
    out = []
    for f in fields(ops):
        line = _line(f"{prefix}_{f.name}", labels, getattr(ops, f.name))
        if line:
            out.append(line)
    return out


def render(metrics: Metrics, statuses: list[ProjectionStatus], alerts: Counter[str]) -> str:
    """The exposition text of every metric (gauges; one sample per label set)."""
    lines: list[str | None] = []
    for status in statuses:
        for ts in status.table_sets:
            where = {"projection": ts.name, "version": ts.version, "status": ts.status}
            lines.append(_line("projection_lag_events", where, ts.events_behind))
            lines.append(_line("projection_lag_seconds", where, ts.seconds_behind))
    for d in metrics.definitions:
        labels: dict[str, Any] = {"definition": d.definition}
        for f in fields(d):
            value = getattr(d, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                lines.append(_line(f"definition_{f.name}", labels, value))
        lines += _operation_lines("definition", labels, d.operations)
    for t in metrics.tools:
        lines += _operation_lines("tool", {"tool": t.tool, "kind": t.kind}, t.operations)
    letters = metrics.dead_letters
    if letters is not None:  # the platform's view: a tenant's counts no dead letters
        lines += [
            "# TYPE sagafleet_dead_letters_recorded_total counter",
            _line("dead_letters_recorded_total", {}, letters.recorded),
            "# TYPE sagafleet_dead_letters_open gauge",
            _line("dead_letters_open", {}, letters.open),
            "# TYPE sagafleet_commands_refused_total counter",
        ]
        lines += [_line("commands_refused_total", {"refusal": refusal}, count)
                  for refusal, count in letters.refused.items()]
    for kind in (
        "captured_without_confirmation",
        "compensation_failing",
        "executed_before_approval",
        "unresolved_ambiguous_outcomes",
    ):
        lines.append(_line("alerts", {"kind": kind}, alerts.get(kind, 0)))
    return "\n".join(line for line in lines if line) + "\n"


def scrape(ctx: ProjectionContext) -> str:
    """Collect everything and render it (one scrape)."""
    # The exporter is the platform's monitoring: every tenant's sagas, counted together.
    alerts = Counter(a.kind for a in platform_alerts(ctx))
    return render(collect_platform_metrics(ctx), projection_status(ctx), alerts)


class MetricsServer:
    """Serves ``GET /metrics`` on a background thread until :meth:`close`."""

    def __init__(self, ctx: ProjectionContext, host: str = "0.0.0.0", port: int = 9464) -> None:  # noqa: S104
        self.ctx = ctx
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                try:
                    body = scrape(outer.ctx).encode()
                except SagaError as exc:
                    self.send_error(503, str(exc))
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug(format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._serving = False

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        """Start serving in the background."""
        self._thread.start()
        self._serving = True
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread."""
        self._serving = True
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._serving:
            self._server.shutdown()
        self._server.server_close()
