"""``/sagas`` (the tenant's sagas, filtered and keyset-paged) and ``/sagas/{saga_id}`` (one
saga: timeline with the chain check, dependency graph, steps and receipts, approvals,
budgets, replay as of a log position).

Both read for the signed-in principal's tenant only. Another tenant's saga is 404, the same
page as a saga that does not exist: the console never says whether it exists elsewhere.

Hooks a test (or a browser test) may rely on: list rows ``<tr data-saga="ID">``, paging links
``a[rel=next]`` (older) and ``a[rel=prev]`` (newer); on the saga page, graph boxes
``g.node[data-step][data-kind][data-state]``, sections ``#graph``, ``#steps`` (rows
``#step-STEP-KIND``), ``#approvals``, ``#budget``, ``#timeline`` (chain cells
``td.chain-ok|chain-broken|chain-unverified``), the queue link ``a.to-queue`` and the replay
form ``form.replay`` (field ``at``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from application.principals.directory import PrincipalNotFound
from events.saga_log.streams import SagaNotFound
from projections import audit, browse_sagas
from saga_core.errors import ErrorKind, SagaError
from sagafleet.console.core import Console
from sagafleet.console.gate import viewer_of
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import Markup, html, url_part
from sagafleet.console.pages.saga_context import context_of, render_context
from sagafleet.console.pages.saga_export import saga_export
from sagafleet.console.pages.saga_gantt import gantt_bars, render_gantt
from sagafleet.console.pages.saga_markup import render_not_found, render_saga, render_saga_live
from sagafleet.console.pages.saga_reading import SagaDetail, parse_at, saga_detail
from sagafleet.console.pages.sagas_markup import (
    parse_query,
    render_list,
    render_page,
    without_bad_values,
)

NAV = NavLink(20, "Sagas", "/sagas")
FRAGMENT_HEADER = "x-sagafleet-fragment"
"""Set by console.js on a ``data-live`` refresh: answer with the live part alone."""


def _wants_fragment(request: Request) -> bool:
    return request.headers.get(FRAGMENT_HEADER) == "1"


def routes(console: Console) -> list[Route]:
    """The saga list and saga page routes, bound to ``console``."""

    def names(tenant: str) -> list[str]:
        return [record.name for record in console.read.definitions.list(tenant=tenant)]

    def saga_list(request: Request) -> Response:
        viewer = viewer_of(request)
        params = dict(request.query_params)
        now = datetime.now(UTC)
        try:
            query = parse_query(params, tenant=viewer.tenant, now=now)
            page = browse_sagas(console.read, tenant=viewer.tenant, limit=query.limit,
                                filters=query.filters, older_than=query.older,
                                newer_than=query.newer)
        except SagaError as exc:
            if exc.kind is not ErrorKind.INVALID_INPUT:
                raise
            body = render_list(None, without_bad_values(params), str(exc), live_url="",
                               now=now, definitions=names(viewer.tenant))
            return console.page(request, "Sagas", body, current=NAV.path, status=400)
        if _wants_fragment(request):
            return console.fragment(render_page(page, query, now))
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return console.page(request, "Sagas",
                            render_list(page, query, None, live_url=here, now=now,
                                        definitions=names(viewer.tenant)),
                            current=NAV.path)

    def saga_page(request: Request) -> Response:
        viewer = viewer_of(request)
        saga_id = request.path_params["saga_id"]
        try:
            at = parse_at(request.query_params.get("at"))
            detail = saga_detail(console.read_after(request), console.fleet.principals,
                                 tenant=viewer.tenant, saga_id=saga_id, at=at,
                                 thresholds=console.alert_thresholds)
        except SagaNotFound:
            return console.page(request, "Not found", render_not_found(saga_id),
                                current=NAV.path, status=404)
        except SagaError as exc:
            if exc.kind is not ErrorKind.INVALID_INPUT:
                raise
            body = html('<link rel="stylesheet" href="/static/sagas.css"><h1>Saga {}</h1>'
                        '<p class="problem" role="alert">{}</p><p><a href="/sagas/{}">'
                        'The saga now</a></p>', saga_id, str(exc), url_part(saga_id))
            return console.page(request, "Saga", body, current=NAV.path, status=400)
        context, gantt = _context(detail), _gantt(detail)
        if _wants_fragment(request) and at is None:
            return console.fragment(render_saga_live(detail, context=context, gantt=gantt))
        return console.page(request, f"Saga {saga_id}",
                            render_saga(detail, context=context, gantt=gantt), current=NAV.path)

    def _context(detail: SagaDetail) -> Markup:
        started = detail.history.timeline[0]
        actor = str(started.data.get("actor") or "")
        try:
            kind: str | None = (str(console.fleet.principals.get(detail.tenant, actor).kind)
                                if actor else None)
        except PrincipalNotFound:
            kind = None
        return html('<section id="context"><h2>Who asked, and why</h2>{}</section>',
                    render_context(context_of(detail.saga_id, started.data, detail.definition,
                                              kind)))

    def _gantt(detail: SagaDetail) -> Markup:
        timeline = detail.history.timeline
        until = (timeline[-1].at if detail.summary.finished_at is not None
                 else max(datetime.now(UTC), timeline[-1].at))
        return render_gantt(gantt_bars(timeline, until), start=timeline[0].at, until=until)

    def saga_export_json(request: Request) -> Response:
        viewer = viewer_of(request)
        saga_id = request.path_params["saga_id"]
        try:
            report = audit(console.read_after(request), saga_id, tenant=viewer.tenant)
        except SagaNotFound:
            return JSONResponse({"error": f"no saga {saga_id!r} here"}, status_code=404)
        document = saga_export(report, tenant=viewer.tenant)
        guard = console.fleet.secret_guard
        needles = guard.named_in(json.dumps(document, default=str))
        if needles:
            document = guard.document(document, needles, "page")
        return JSONResponse(document, headers={
            "Content-Disposition": f'attachment; filename="saga-{url_part(saga_id)}.json"'})

    return [Route("/sagas", saga_list, methods=["GET"]),
            Route("/sagas/{saga_id}/export.json", saga_export_json, methods=["GET"]),
            Route("/sagas/{saga_id}", saga_page, methods=["GET"])]
