"""The queue page: what waits for a person, most urgent first, with the evidence to decide it.

``GET /queue`` is the page; ``GET /queue/fragment`` is its list alone, which the page's script
fetches again whenever the read models move (``data-live``), so a new request appears within
a second or two without a reload. Each entry shows the saga, step and operation, the
arguments (secrets masked), the receipts so far, what happens on approve and on deny, the
expiry, the risk gate and its role, and the business rules of the definition; then the
actions the signed-in principal's roles allow (an auditor sees none).
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from saga_core.access.roles import Action
from sagafleet.console.actions import (
    approve_form,
    cancel_form,
    deny_form,
    done_notice,
    may,
    may_approve,
    may_deny,
    resolve_form,
)
from sagafleet.console.core import Console
from sagafleet.console.gate import viewer_of
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import Markup, html, join, pretty_json, url_part
from sagafleet.console.queue_view import GateView, QueueItem, queue_items
from sagafleet.console.saga_page import queue_anchor  # the saga page links here
from sagafleet.console.sessions import Viewer

__all__ = ["NAV", "routes"]

NAV = NavLink(10, "Queue", "/queue")
PAGE_SIZE = 100


def routes(console: Console) -> list[BaseRoute]:
    """The queue page and its live fragment."""

    def items_of(viewer: Viewer) -> list[QueueItem]:
        return queue_items(console.read, tenant=viewer.tenant, now=datetime.now(UTC),
                           limit=PAGE_SIZE)

    def queue_page(request: Request) -> Response:
        viewer = viewer_of(request)
        body = html(
            '<div class="page-head"><h1>Waiting for a person</h1>'
            '<span class="live-status"></span></div>{}{}'
            '<div id="queue" data-live="/queue/fragment">{}</div>',
            done_notice(request), _read_only_note(viewer),
            queue_list(viewer, items_of(viewer)))
        return console.page(request, "Queue", body, current="/queue")

    def queue_fragment(request: Request) -> Response:
        viewer = viewer_of(request)
        return console.fragment(queue_list(viewer, items_of(viewer)))

    return [Route("/queue", queue_page, methods=["GET"]),
            Route("/queue/fragment", queue_fragment, methods=["GET"])]


def _read_only_note(viewer: Viewer) -> Markup:
    principal = viewer.principal
    if may(principal, Action.RESOLVE) or may(principal, Action.CANCEL) or any(
            may_approve(principal, role) for role in principal.roles
            if role not in ("auditor", "admin")):
        return Markup("")
    return html('<p class="notice" role="note">Read-only: your roles ({}) let you see '
                'everything of tenant {} and act on nothing.</p>',
                ", ".join(sorted(principal.roles)), viewer.tenant)


def queue_list(viewer: Viewer, items: list[QueueItem]) -> Markup:
    """The entries as cards (what the live fragment holds)."""
    if not items:
        return html('<p class="empty muted">Nothing waits for a person in tenant {}.</p>',
                    viewer.tenant)
    count = html('<p class="muted count">{} waiting, most urgent first{}.</p>', len(items),
                 f" (the first {PAGE_SIZE})" if len(items) >= PAGE_SIZE else "")
    return count + join(_card(viewer, item) for item in items)


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "none"


def _card(viewer: Viewer, item: QueueItem) -> Markup:
    row = item.row
    entry = "approval" if item.is_approval else "manual intervention"
    urgent = html('<span class="badge urgent">urgent</span>') if item.urgent else Markup("")
    step = html("{} ({})", row.step_id, row.kind) if row.step_id else Markup("the saga")
    return html(
        '<article class="card queue-item" id="{}" data-saga="{}" data-step="{}" '
        'data-entry="{}">'
        '<header><span class="badge">{}</span>{}<a class="saga" href="/sagas/{}">'
        '<code>{}</code></a><span>{}</span><span class="step">{}</span></header>'
        '<p class="reason">{}</p><dl>{}</dl>{}</article>',
        queue_anchor(row), row.saga_id, row.step_id, row.entry, entry, urgent,
        url_part(row.saga_id), row.saga_id,
        item.definition_label, step, row.reason, _evidence(item), _actions(viewer, item))


def _evidence(item: QueueItem) -> Markup:
    row = item.row
    parts = [
        _pair("action", html("<code>{}</code>", item.intended_action)),
        _pair("arguments", pretty_json(dict(item.arguments)) if item.arguments
              else html('<span class="muted">none recorded</span>')),
    ]
    if item.affected_resource:
        parts.append(_pair("resource", html("<code>{}</code>", item.affected_resource)))
    parts.append(_pair("receipts so far", _receipts(item)))
    if item.is_approval:
        parts.append(_pair("on approve", html("{}", item.on_approve)))
        parts.append(_pair("on deny", html("{}", item.on_deny)))
    else:
        choices = join(html("<li><strong>{}</strong>: {}</li>", c.action.replace("_", " "),
                            c.effect) for c in item.choices)
        parts.append(_pair("choices", html("<ul>{}</ul>", choices) if item.choices
                           else html('<span class="muted">cancel only</span>')))
    if item.residual_risk:
        parts.append(_pair("residual risk", html("{}", item.residual_risk)))
    parts.append(_pair("expires" if item.is_approval else "deadline",
                       html("{}", _when(row.deadline))))
    parts.append(_pair("asked", html("{}", _when(row.requested_at))))
    parts.append(_pair("risk gate", _gate(item.gate)))
    if item.business_rules:
        parts.append(_pair("business rule", join(html("<div>{}</div>", rule)
                                                 for rule in item.business_rules)))
    parts.append(_pair("saga", html("{} · version {}", item.saga_state,
                                    item.seen_version if item.seen_version is not None
                                    else "?")))
    return join(parts)


def _pair(term: str, value: Markup) -> Markup:
    return html("<dt>{}</dt><dd>{}</dd>", term, value)


def _receipts(item: QueueItem) -> Markup:
    if not item.receipts:
        return html('<span class="muted">none yet</span>')
    return html('<table class="receipts"><thead><tr><th>step</th><th>operation</th>'
                '<th>state</th><th>receipt</th></tr></thead><tbody>{}</tbody></table>',
                join(html("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                          r.step_id, r.kind, r.status, pretty_json(dict(r.receipt)))
                     for r in item.receipts))


def _gate(gate: GateView | None) -> Markup:
    if gate is None:
        return html('<span class="muted">no gate: an operator decides</span>')
    risk = html('<span class="badge">{} risk</span> ', gate.risk_class) if gate.risk_class \
        else Markup("")
    amount = html(" · {} {:g}", gate.amount_arg, gate.amount) if gate.amount_arg and \
        gate.amount is not None else Markup("")
    four = Markup(" · not the saga's starter (four eyes)") if gate.four_eyes else Markup("")
    reasons = join(html("<div>{}</div>", r) for r in (*gate.reasons, *gate.totals))
    return html('{}a person with role <span class="badge role">{}</span>{}{}{}',
                risk, gate.role, four, amount, reasons)


def _actions(viewer: Viewer, item: QueueItem) -> Markup:
    principal = viewer.principal
    row = item.row
    forms: list[Markup] = []
    role = item.gate.role if item.gate else None
    if item.is_approval and may_approve(principal, role):
        forms.append(approve_form(
            viewer, saga_id=row.saga_id, step_id=row.step_id, kind=row.kind,
            action_hash=row.action_hash, seen_version=item.seen_version,
            amount_arg=item.gate.amount_arg if item.gate else None, return_to="/queue"))
    if item.is_approval and may_deny(principal, role):
        forms.append(deny_form(viewer, saga_id=row.saga_id, step_id=row.step_id,
                               kind=row.kind, seen_version=item.seen_version,
                               return_to="/queue"))
    if not item.is_approval and may(principal, Action.RESOLVE):
        forms.append(resolve_form(
            viewer, saga_id=row.saga_id, step_id=row.step_id, kind=row.kind or "forward",
            choices=[(c.action, c.effect) for c in item.choices],
            seen_version=item.seen_version, return_to="/queue"))
    if item.cancellable and may(principal, Action.CANCEL):
        forms.append(cancel_form(viewer, saga_id=row.saga_id, seen_version=item.seen_version,
                                 return_to="/queue"))
    if not forms:
        return Markup("")
    return html('<div class="actions">{}</div>', join(forms))
