"""``/workers``: the fleet's workers alive now, what each runs and has processed.

Asked of the workers themselves through Celery's remote control
(:func:`workers.inspection.inspect_fleet`: one ping, then their active tasks and stats),
with a short timeout, each time the page is opened — not on every live refresh, since each
look is a broadcast every worker must answer. When the fleet runs with remote control off,
or nobody answers, the page says which, instead of an empty table. Tasks are shown by name,
id and start time only (never their arguments, which name sagas of every tenant).

The workers are the fleet's, shared by every tenant: what each runs and has processed is every
tenant's work, so the table shows only to the ``fleet_operator`` role (``Action.FLEET``).
Everyone else learns whether workers answer and how many — what a tenant needs to tell a
stopped fleet from a slow saga — and nothing of the work they do.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from saga_core.access.roles import Action
from sagafleet.console.core import Console
from sagafleet.console.gate import viewer_of
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import Markup, html, join
from sagafleet.console.pages.health import STYLESHEET
from sagafleet.console.sessions import Viewer
from workers.inspection import (
    ActiveTask,
    FleetInspection,
    InspectionOutcome,
    WorkerState,
    inspect_fleet,
)

NAV = NavLink(50, "Workers", "/workers")

INSPECT_TIMEOUT_S: Final = 1.0
"""How long the page waits for the workers' replies (a busy worker answers between tasks)."""


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def _task(task: ActiveTask, now: datetime) -> Markup:
    running = (f" · {(now - task.started_at).total_seconds():.1f} s"
               if task.started_at is not None else "")
    return html('<li><code>{}</code> <span class="muted">{}{}</span></li>', task.name,
                task.task_id[:8], running)


def _processed(worker: WorkerState) -> Markup:
    if not worker.processed:
        return html("0")
    return html('{} <span class="muted">({})</span>', worker.processed_total,
                ", ".join(f"{name}: {count}" for name, count in sorted(worker.processed.items())))


def _table(inspection: FleetInspection) -> Markup:
    now = datetime.now(UTC)
    rows = join(
        html('<tr class="worker" data-hostname="{}"><td><code>{}</code></td><td>{}</td>'
             '<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
             w.hostname, w.hostname, w.pid if w.pid is not None else "—",
             w.concurrency if w.concurrency is not None else "—", _uptime(w.uptime_s),
             html('<ul>{}</ul>', join(_task(t, now) for t in w.active)) if w.active
             else html('<span class="muted">idle</span>'),
             _processed(w))
        for w in inspection.workers)
    return html('<table class="workers"><thead><tr><th>hostname</th><th>pid</th>'
                '<th>concurrency</th><th>up</th><th>active tasks</th><th>processed</th></tr>'
                '</thead><tbody>{}</tbody></table>', rows)


def _body(inspection: FleetInspection, viewer: Viewer) -> Markup:
    fleet_wide = Action.FLEET in viewer.principal.allowed()
    if inspection.outcome is InspectionOutcome.ANSWERED and not fleet_wide:
        return html('<p class="muted workers-summary">{} (asked just now). What each runs and '
                    'has processed is every tenant\'s work: only the <code>fleet_operator</code>'
                    ' role sees it (you hold: {}).</p>', inspection.message,
                    ", ".join(sorted(viewer.principal.roles)) or "no role")
    if inspection.outcome is InspectionOutcome.ANSWERED:
        return html('<p class="muted workers-summary">{} (asked just now, waiting {} s for '
                    'replies)</p>{}', inspection.message, f"{inspection.timeout_s:g}",
                    _table(inspection))
    css = "error" if inspection.outcome is InspectionOutcome.BROKER_UNREACHABLE else ""
    return html('<p class="notice {} workers-unavailable" role="status" data-outcome="{}">{}'
                '</p>', css, inspection.outcome, inspection.message)


def routes(console: Console) -> list[BaseRoute]:
    """The workers page."""

    def workers_page(request: Request) -> Response:
        inspection = inspect_fleet(console.fleet.celery,
                                   remote_control=console.fleet.config.remote_control,
                                   timeout_s=INSPECT_TIMEOUT_S)
        body = html('{}<div class="health-head"><h1>Workers</h1>'
                    '<a href="/workers">look again</a></div>{}', STYLESHEET,
                    _body(inspection, viewer_of(request)))
        return console.page(request, "Workers", body, current="/workers")

    return [Route("/workers", workers_page, methods=["GET"])]
