"""The operator queue page (placeholder until the full page lands)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from projections import operator_queue
from sagafleet.console.core import Console
from sagafleet.console.gate import viewer_of
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import html, join

NAV = NavLink(10, "Queue", "/queue")


def routes(console: Console) -> list[BaseRoute]:
    """The queue page."""

    def queue_page(request: Request) -> Response:
        viewer = viewer_of(request)
        rows = operator_queue(console.read, tenant=viewer.tenant, limit=100)
        items = join(html("<li>{} · {} · {}</li>", row.saga_id, row.step_id, row.reason)
                     for row in rows)
        return console.page(request, "Queue", html("<h1>Queue</h1><ul>{}</ul>", items),
                            current="/queue")

    return [Route("/queue", queue_page, methods=["GET"])]
