"""The queue page: what waits for a person, one line per request, the decision in words.

``GET /queue`` is the page; ``GET /queue/fragment`` is its list alone, which the page's script
fetches again whenever the read models move (``data-live``) and merges around what a person
is working on (a focused or half-typed line stays as it is; every other line is replaced),
so a new request appears within a second or two without a reload and nothing typed is lost.

Each request is one line (:mod:`sagafleet.console.pages.queue_line`): who asks, what, how
much, why a person is asked, time left, and Approve / Deny with a reason; the full evidence
(the saga's starter, reason, lineage and masked input, the arguments, receipts so far, what
happens on approve and on deny, the risk gate, the business rules, and the other forms) is
one click away in the line's ``<details>``. The query string filters, sorts, searches and
pages the queue (:mod:`sagafleet.console.pages.queue_query`); counts per state head the list.
A principal who cannot answer is told why once (an auditor: read-only; an agent: only a
person answers).
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from application.client import InvalidRequest
from saga_core.access.roles import Action, NotPermitted, PrincipalKind
from saga_core.limits import REASON_CHARS
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
from sagafleet.console.claims import Claim, ClaimStore, RequestKey
from sagafleet.console.core import Console
from sagafleet.console.gate import form_of, viewer_of
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import Markup, csrf_field, html, join, pretty_json
from sagafleet.console.pages.queue_items import GateView, QueueItem, queue_items_of
from sagafleet.console.pages.queue_line import render_line
from sagafleet.console.pages.queue_query import (
    PAGE_SIZE,
    QueueCounts,
    QueueCursor,
    QueueQuery,
    QueueSort,
    parse_queue_query,
    queue_counts,
    queue_page_rows,
    request_waits,
)
from sagafleet.console.pages.saga_context import render_context
from sagafleet.console.pages.saga_markup import queue_anchor  # the saga page links here
from sagafleet.console.sessions import Viewer

__all__ = ["NAV", "routes"]

NAV = NavLink(10, "Queue", "/queue")


def routes(console: Console) -> list[BaseRoute]:
    """The queue page and its live fragment."""

    claims = ClaimStore(console.fleet.store)

    def listing(request: Request) -> tuple[Viewer, QueueQuery, Markup]:
        viewer = viewer_of(request)
        query = parse_queue_query(request.query_params)
        now = datetime.now(UTC)
        read = console.read_after(request)
        rows, after = queue_page_rows(read, query, tenant=viewer.tenant, now=now,
                                      limit=PAGE_SIZE)
        items = queue_items_of(read, rows, tenant=viewer.tenant, now=now,
                               directory=console.fleet.principals)
        counts = queue_counts(read, query, tenant=viewer.tenant, now=now)
        held = claims.open_claims(viewer.tenant, sorted({row.saga_id for row in rows}))
        return viewer, query, queue_list(viewer, items, counts, query, after=after, now=now,
                                         claims=held)

    def queue_page(request: Request) -> Response:
        viewer, query, listed = listing(request)
        live = "/queue/fragment" + (f"?{urlencode(query.params(after=query.after))}"
                                    if query.params(after=query.after) else "")
        body = html(
            '<div class="page-head"><h1>Waiting for a person</h1>'
            '<span class="live-status"></span></div>{}{}{}{}'
            '<div id="queue" data-live="{}">{}</div>',
            done_notice(request), _cannot_answer_note(viewer), _filters(query),
            _bulk_form(viewer), live, listed)
        return console.page(request, "Queue", body, current="/queue")

    def queue_fragment(request: Request) -> Response:
        return console.fragment(listing(request)[2])

    def claim(request: Request) -> Response:
        """Claim a request ("I'm on it", or take a colleague's claim over) or let go of one."""
        viewer = viewer_of(request)
        form = form_of(request)
        if not _may_claim(viewer):
            raise NotPermitted(f"{viewer.principal.name!r} cannot answer queue requests, so "
                               "claims none")
        key = RequestKey(form.text("saga_id"), form.text("entry"), form.text("step"),
                         form.text("kind"))
        if not _in_queue(console, viewer.tenant, key):
            raise InvalidRequest("no such request waits in the queue (answered meanwhile?): "
                                 "reload the queue")
        now = datetime.now(UTC)
        if form.text("claim") == "release":
            outcome = claims.release(viewer.tenant, key, viewer.principal.name, now)
        else:
            outcome = claims.claim(viewer.tenant, key, viewer.principal.name, now)
        query = urlencode({"done": outcome.value, "saga": key.saga_id})
        return RedirectResponse(f"/queue?{query}", status_code=303)

    return [Route("/queue", queue_page, methods=["GET"]),
            Route("/queue/fragment", queue_fragment, methods=["GET"]),
            Route("/queue/claim", claim, methods=["POST"])]


def _in_queue(console: Console, tenant: str, key: RequestKey) -> bool:
    """Whether the request waits in the tenant's queue (read on the primary)."""
    return request_waits(console.fresh, tenant=tenant, saga_id=key.saga_id, entry=key.entry,
                         step_id=key.step_id, kind=key.kind)


def _may_claim(viewer: Viewer) -> bool:
    """A person who may answer something in the queue (never an agent or an auditor)."""
    principal = viewer.principal
    return principal.kind is PrincipalKind.PERSON and (
        _answers_some(viewer) or may(principal, Action.RESOLVE))


def _claim_part(viewer: Viewer, item: QueueItem, held: Claim | None) -> Markup:
    """Who is on the request, and the button to claim it, take it over or let go."""
    row = item.row
    mine = held is not None and held.claimed_by == viewer.principal.name
    shown = Markup("")
    if held is not None:
        shown = html('<span class="claim{}">{} on it since <time datetime="{}">{}</time>'
                     '</span>', " mine" if mine else "", "You are" if mine
                     else f"{held.claimed_by} is", held.claimed_at.isoformat(),
                     held.claimed_at.astimezone(UTC).strftime("%H:%M UTC"))
    if not _may_claim(viewer):
        return shown
    label = "Let go" if mine else ("Take over" if held is not None else "I'm on it")
    return shown + html(
        '<form method="post" action="/queue/claim" class="claim-form">{}'
        '<input type="hidden" name="saga_id" value="{}"><input type="hidden" name="entry" '
        'value="{}"><input type="hidden" name="step" value="{}"><input type="hidden" '
        'name="kind" value="{}"><button type="submit" name="claim" value="{}" '
        'class="link">{}</button></form>',
        csrf_field(viewer), row.saga_id, row.entry, row.step_id, row.kind,
        "release" if mine else "claim", label)


def _answers_some(viewer: Viewer) -> bool:
    """Whether the viewer may answer some approval (a person with an approving role)."""
    principal = viewer.principal
    return any(may_approve(principal, role) for role in principal.roles
               if role not in ("auditor", "admin")) or may_deny(principal, "approver")


def _cannot_answer_note(viewer: Viewer) -> Markup:
    principal = viewer.principal
    if principal.kind is PrincipalKind.AGENT:
        return html('<p class="notice" role="note">You are signed in as an agent ({}): only '
                    'a person answers an approval, so the queue shows no Approve or Deny '
                    'to you.</p>', principal.name)
    if may(principal, Action.RESOLVE) or may(principal, Action.CANCEL) or any(
            may_approve(principal, role) for role in principal.roles
            if role not in ("auditor", "admin")):
        return Markup("")
    return html('<p class="notice" role="note">Read-only: your roles ({}) let you see '
                'everything of tenant {} and act on nothing.</p>',
                ", ".join(sorted(principal.roles)), viewer.tenant)


def _option(value: str, label: str, chosen: str) -> Markup:
    return html('<option value="{}"{}>{}</option>', value,
                Markup(" selected") if value == chosen else "", label)


def _filters(query: QueueQuery) -> Markup:
    """The filter bar (a GET form: the filters live in the URL)."""
    sorts = join(_option(s.value, label, query.sort.value) for s, label in (
        (QueueSort.URGENT, "most urgent"), (QueueSort.OLDEST, "oldest"),
        (QueueSort.NEWEST, "newest")))
    entries = join(_option(value, label, query.entry or "") for value, label in (
        ("", "any request"), ("approval", "approvals"),
        ("manual_intervention", "manual interventions")))
    age = ""
    if query.age is not None:
        age = query.params().get("age", "")
    return html(
        '<form class="filters" method="get" action="/queue" role="search">'
        '<label class="sr-only" for="f-q">Search</label><input id="f-q" type="search" '
        'name="q" value="{}" placeholder="search saga, step, reason">'
        '<label class="sr-only" for="f-sort">Sort</label><select id="f-sort" name="sort">{}'
        '</select><details class="more-filters"{}><summary>Filters</summary>'
        '<label for="f-entry">State</label><select id="f-entry" name="entry">{}</select>'
        '<label for="f-gate">Gate role</label><input id="f-gate" name="gate" value="{}" '
        'size="10">'
        '<label for="f-risk">Risk class</label><input id="f-risk" name="risk" value="{}" '
        'size="10">'
        '<label for="f-definition">Definition</label><input id="f-definition" '
        'name="definition" value="{}" size="10">'
        '<label for="f-age">Asked at least</label><input id="f-age" name="age" value="{}" '
        'size="5" placeholder="30m, 2h, 1d"> ago</details>'
        '<button type="submit">Show</button>{}</form>',
        query.search, sorts, Markup(" open") if query.filtered and not query.search else "",
        entries, query.gate or "", query.risk or "", query.definition or "", age,
        html('<a href="/queue">clear</a>') if query.filtered else "")


def _bulk_form(viewer: Viewer) -> Markup:
    """Answer the selected requests at once, each with this reason (each still bound to the
    version its line showed, and to four eyes: the server checks every one). Only the answers
    the viewer's roles can give are drawn."""
    principal = viewer.principal
    if not _answers_some(viewer) or principal.kind is not PrincipalKind.PERSON:
        return Markup("")
    approves = any(may_approve(principal, role) for role in principal.roles
                   if role not in ("auditor", "admin"))
    return html(
        '<button type="submit" form="bulk" class="default-guard" disabled hidden '
        'tabindex="-1"></button>'
        '<form id="bulk" class="bulk" method="post" action="/actions/bulk" data-once>{}'
        '<span class="muted">Selected:</span><label class="sr-only" for="bulk-reason">Reason '
        'for the selected requests</label><input id="bulk-reason" type="text" name="reason" '
        'required maxlength="{}" placeholder="reason for all selected" autocomplete="off">'
        '{}<button type="submit" name="decision" value="deny">Deny selected</button></form>',
        csrf_field(viewer), REASON_CHARS.value,
        html('<button type="submit" name="decision" value="approve">Approve selected'
             '</button>') if approves else "")


def queue_list(viewer: Viewer, items: list[QueueItem], counts: QueueCounts,
               query: QueueQuery, *, after: QueueCursor | None, now: datetime,
               claims: dict[RequestKey, Claim] | None = None) -> Markup:
    """The counts, the lines and the pager (what the live fragment holds)."""
    tally = html(
        '<p class="counts muted" aria-live="polite"><span class="count-approvals">{} '
        'approval{}</span> · <span class="count-interventions">{} manual intervention{}'
        '</span> · <span class="count-urgent">{} urgent</span>{}</p>',
        counts.approvals, "" if counts.approvals == 1 else "s", counts.interventions,
        "" if counts.interventions == 1 else "s", counts.urgent,
        html(" · {} match the filters", counts.matching) if query.filtered else "")
    if not items:
        empty = ("Nothing matches these filters." if query.filtered
                 else f"Nothing waits for a person in tenant {viewer.tenant}.")
        return tally + html('<p class="empty muted">{}</p>', empty)
    selectable = _answers_some(viewer) and viewer.principal.kind is PrincipalKind.PERSON
    lines = join(render_line(viewer, item, now, anchor=queue_anchor(item.row),
                             selectable=selectable and item.is_approval,
                             claim=_claim_part(viewer, item, (claims or {}).get(RequestKey(
                                 item.row.saga_id, item.row.entry, item.row.step_id,
                                 item.row.kind))),
                             evidence=_evidence(viewer, item)) for item in items)
    pager = Markup("")
    if after is not None or query.after is not None:
        pager = html('<nav class="pager" aria-label="queue pages">{}{}</nav>',
                     html('<a rel="first" href="/queue?{}">First page</a> ',
                          urlencode(query.params())) if query.after else "",
                     html('<a rel="next" href="/queue?{}">Next {}</a>',
                          urlencode(query.params(after=after)), PAGE_SIZE) if after else "")
    return tally + lines + pager


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "none"


def _evidence(viewer: Viewer, item: QueueItem) -> Markup:
    """Everything about the request: the saga's context, then the evidence and the forms."""
    return html('{}<dl>{}</dl>{}', render_context(item.context), _evidence_pairs(item),
                _actions(viewer, item))


def _evidence_pairs(item: QueueItem) -> Markup:
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
    if (item.is_approval and may_approve(principal, role)
            and not item.starter_excluded(principal.name)):
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
