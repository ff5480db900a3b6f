"""The console's typed operator actions: approve, deny, resolve and cancel, as forms and posts.

Every action goes through the signed-in principal's ``SagaClient`` (the CLI's API, with its
server-side checks: a role that does not allow it is refused whatever the page showed), asks
for a reason, and is bound to the saga version the person saw (``seen_version``, a hidden
field): if the saga moved meanwhile nothing is recorded and the answer (409) shows the saga as
it is now. The same click twice records one grant, denial, cancel or action (the client's
rule), and the form's script disables its button after the first click.

Routes (``POST``, CSRF-checked by the gate): ``/actions/approve``, ``/actions/deny``,
``/actions/decide`` (a queue line's one form: ``decision`` is approve or deny),
``/actions/resolve``, ``/actions/cancel``, and ``/actions/bulk`` (the selected requests
answered one by one with one reason, each bound to its version: a page of per-item
outcomes). A success redirects (303) to the form's
``return_to`` (a path of this site) with ``done`` and ``saga`` in the query, which
:func:`done_notice` turns into a message. The forms are built here so that every page that
offers an action (the queue, a saga's page) offers the same one: :func:`approve_form`,
:func:`deny_form` (both: :func:`approval_forms`), :func:`resolve_form`, :func:`cancel_form`;
:func:`may_approve`, :func:`may_deny`, :func:`may` say whether to show them (the server
decides anyway).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from application.client import InvalidRequest, SagaClient
from application.views import SagaView
from saga_core.access.roles import OPERATOR_ROLE, Action, Principal, PrincipalKind
from saga_core.contracts import StepKind
from saga_core.engine.resolution import OPERATOR_ACTIONS
from saga_core.errors import ErrorKind, SagaError, SagaMoved
from saga_core.limits import REASON_CHARS
from sagafleet.console.core import Console, note_error, status_of
from sagafleet.console.gate import Form, form_of, viewer_of
from sagafleet.console.markup import Markup, csrf_field, html, join, url_part
from sagafleet.console.sessions import Viewer
from sagafleet.console.signin import safe_next

__all__ = ["DONE_MESSAGES", "BulkOutcome", "BulkTarget", "answer_each", "approval_forms",
           "approve_form", "cancel_form", "deny_form", "done_notice", "may", "may_approve",
           "may_deny", "resolve_form", "routes", "saga_state_box"]

DONE_MESSAGES: Final = {
    "approved": "Approved",
    "denied": "Denied",
    "resolved": "Recorded the operator action on",
    "cancelled": "Asked to cancel",
    "unchanged": "Nothing new was recorded (the same action was already there) for",
    "claimed": "You are on a request of",
    "taken_over": "You took over the claim on a request of",
    "already_yours": "You were already on the request of",
    "released": "You let go of the request of",
}
"""The notices a redirect after an action may ask for (by code: never text from the URL)."""


# -- who sees which button ---------------------------------------------------------------


def may(principal: Principal, action: Action) -> bool:
    """Whether one of the principal's roles allows ``action`` (cancel, resolve)."""
    return action in principal.allowed()


def may_approve(principal: Principal, role: str | None) -> bool:
    """Whether the principal could answer an approval whose gate names ``role`` (a person
    with the role; the server also checks four eyes, tenant and expiry)."""
    return principal.kind is PrincipalKind.PERSON and principal.has_role(role or "approver")


def may_deny(principal: Principal, role: str | None) -> bool:
    """Whether the principal could deny such a request: the gate's role, or an operator
    (a person either way)."""
    return may_approve(principal, role) or (principal.kind is PrincipalKind.PERSON
                                            and principal.has_role(OPERATOR_ROLE))


# -- the forms -----------------------------------------------------------------------------


def _hidden(viewer: Viewer, saga_id: str, seen_version: int | None, return_to: str,
            **fields: str) -> Markup:
    extra = join(html('<input type="hidden" name="{}" value="{}">', name, value)
                 for name, value in fields.items())
    return html('{}<input type="hidden" name="saga_id" value="{}">'
                '<input type="hidden" name="seen_version" value="{}">'
                '<input type="hidden" name="return_to" value="{}">{}',
                csrf_field(viewer), saga_id, "" if seen_version is None else seen_version,
                return_to, extra)


def _reason(label: str, form_id: str) -> Markup:
    return html('<label for="{}-reason">{}</label><input id="{}-reason" type="text" '
                'name="reason" required maxlength="{}" placeholder="why">',
                form_id, label, form_id, REASON_CHARS.value)


def approve_form(viewer: Viewer, *, saga_id: str, step_id: str, kind: str,
                 action_hash: str | None, seen_version: int | None, amount_arg: str | None,
                 return_to: str) -> Markup:
    """The approve form, with an optional up-to amount when the gate bounds one."""
    ident = f"a-{saga_id[:8]}-{step_id}-{kind}"
    up_to = html('<label for="{}-up-to">up to {}</label><input id="{}-up-to" type="number" '
                 'name="up_to" step="any" min="0" placeholder="as requested">',
                 ident, amount_arg, ident) if amount_arg else Markup("")
    hidden = _hidden(viewer, saga_id, seen_version, return_to, step=step_id, kind=kind,
                     action_hash=action_hash or "")
    return html(
        '<form method="post" action="/actions/approve" class="approve" data-once>{}{}{}'
        '<button type="submit" class="primary">Approve</button></form>',
        hidden, _reason("Reason", ident), up_to)


def deny_form(viewer: Viewer, *, saga_id: str, step_id: str, kind: str,
              seen_version: int | None, return_to: str) -> Markup:
    """The deny form."""
    ident = f"d-{saga_id[:8]}-{step_id}-{kind}"
    return html(
        '<form method="post" action="/actions/deny" class="deny" data-once>{}{}'
        '<button type="submit" class="danger">Deny</button></form>',
        _hidden(viewer, saga_id, seen_version, return_to, step=step_id, kind=kind),
        _reason("Reason", ident))


def approval_forms(viewer: Viewer, *, saga_id: str, step_id: str, kind: str,
                   action_hash: str | None, seen_version: int | None, amount_arg: str | None,
                   return_to: str) -> Markup:
    """The approve and deny forms together (for a principal who may do both)."""
    return approve_form(viewer, saga_id=saga_id, step_id=step_id, kind=kind,
                        action_hash=action_hash, seen_version=seen_version,
                        amount_arg=amount_arg, return_to=return_to) + deny_form(
        viewer, saga_id=saga_id, step_id=step_id, kind=kind, seen_version=seen_version,
        return_to=return_to)


def resolve_form(viewer: Viewer, *, saga_id: str, step_id: str, kind: str,
                 choices: Sequence[tuple[str, str]], seen_version: int | None,
                 return_to: str) -> Markup:
    """The resolve form: one of the typed actions that fit, a reason, what was checked."""
    if not choices:
        return Markup("")
    ident = f"r-{saga_id[:8]}-{step_id or 'saga'}"
    options = join(html('<option value="{}" title="{}">{}</option>', action, effect,
                        action.replace("_", " ")) for action, effect in choices)
    return html(
        '<form method="post" action="/actions/resolve" class="resolve" data-once>{}'
        '<label for="{}-action">Action</label><select id="{}-action" name="action">{}</select>'
        '{}<label for="{}-checked">Checked</label><input id="{}-checked" type="text" '
        'name="checked" maxlength="{}" placeholder="what you verified (optional)">'
        '<button type="submit">Resolve</button></form>',
        _hidden(viewer, saga_id, seen_version, return_to, step=step_id, kind=kind),
        ident, ident, options, _reason("Reason", ident), ident, ident, REASON_CHARS.value)


def cancel_form(viewer: Viewer, *, saga_id: str, seen_version: int | None,
                return_to: str) -> Markup:
    """The cancel form (compensate what can be compensated)."""
    ident = f"c-{saga_id[:8]}"
    return html('<form method="post" action="/actions/cancel" class="cancel" data-once>{}{}'
                '<button type="submit" class="danger">Cancel saga</button></form>',
                _hidden(viewer, saga_id, seen_version, return_to), _reason("Reason", ident))


def done_notice(request: Request) -> Markup:
    """The message a redirect after an action asked for (empty without one)."""
    code = request.query_params.get("done", "")
    saga_id = request.query_params.get("saga", "")
    if code not in DONE_MESSAGES or not saga_id:
        return Markup("")
    return html('<p class="notice ok" role="status">{} saga <code>{}</code>.</p>',
                DONE_MESSAGES[code], saga_id[:64])


def _answer(approval: dict[str, object] | None) -> str:
    """Who answered an approval request and at which saga version ("carol at version 9")."""
    if not approval or not approval.get("approver"):
        return ""
    version = approval.get("answered_version")
    return f"{approval['approver']} at version {version}" if version else str(approval["approver"])


def saga_state_box(view: SagaView) -> Markup:
    """The saga as the log has it now (shown when an action found it moved)."""
    steps = join(html("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                      run.step_id, run.kind, run.status, _answer(run.approval))
                 for run in view.steps)
    return html(
        '<section class="card current-state"><h2>Saga <code>{}</code> now</h2>'
        '<dl><dt>status</dt><dd>{}</dd><dt>version</dt><dd>{}</dd>'
        '<dt>definition</dt><dd>{} v{}</dd>{}{}</dl>'
        '<table><thead><tr><th>step</th><th>operation</th><th>state</th><th>answered by</th>'
        '</tr></thead><tbody>{}</tbody></table></section>',
        view.saga_id, view.status, view.version, view.definition, view.definition_version,
        html("<dt>cancel</dt><dd>requested</dd>") if view.cancel_requested else "",
        html("<dt>waiting</dt><dd>{}</dd>", (view.escalation or {}).get("reason", ""))
        if view.escalation else "", steps)


# -- the posts -----------------------------------------------------------------------------


def _required(form: Form, name: str) -> str:
    value = form.text(name)
    if not value:
        raise InvalidRequest(f"the form has no {name}: fill it in")
    return value


def _version(form: Form) -> int:
    # expected_version: the field's old name, still posted by a page drawn before the rename.
    raw = form.text("seen_version") or form.text("expected_version")
    if not raw.isdigit():
        raise InvalidRequest("the form does not say which version of the saga was shown "
                             "(seen_version): reload the page")
    return int(raw)


def _kind(form: Form) -> StepKind:
    raw = form.text("kind", "forward")
    if raw not in StepKind._value2member_map_:
        raise InvalidRequest(f"kind must be one of {[k.value for k in StepKind]}")
    return StepKind(raw)


def _up_to(form: Form) -> float | None:
    raw = form.text("up_to")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest("up to must be a number") from None
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequest("up to must be a positive number")
    return value


def _approve(client: SagaClient, form: Form) -> str:
    client.approve(_required(form, "saga_id"), _required(form, "step"), kind=_kind(form),
                   action_hash=form.text("action_hash") or None, up_to=_up_to(form),
                   reason=_required(form, "reason"), seen_version=_version(form))
    return "approved"


def _deny(client: SagaClient, form: Form) -> str:
    client.deny(_required(form, "saga_id"), _required(form, "step"), kind=_kind(form),
                reason=_required(form, "reason"), seen_version=_version(form))
    return "denied"


def _decide(client: SagaClient, form: Form) -> str:
    """A queue line's one form: its pressed button names the decision."""
    decision = form.text("decision")
    if decision == "approve":
        return _approve(client, form)
    if decision == "deny":
        return _deny(client, form)
    raise InvalidRequest("decision must be approve or deny (press one of the line's buttons)")


def _resolve(client: SagaClient, form: Form) -> str:
    action = _required(form, "action")
    if action not in OPERATOR_ACTIONS:
        raise InvalidRequest(f"an operator action is one of {list(OPERATOR_ACTIONS)}")
    checked = form.text("checked")
    resolution = client.resolve(_required(form, "saga_id"), action,
                                step_id=form.text("step") or None, kind=_kind(form),
                                reason=_required(form, "reason"),
                                evidence={"checked": checked} if checked else None,
                                seen_version=_version(form))
    return "resolved" if resolution.recorded is not None else "unchanged"


def _cancel(client: SagaClient, form: Form) -> str:
    client.cancel(_required(form, "saga_id"), reason=_required(form, "reason"),
                  seen_version=_version(form))
    return "cancelled"


Perform = Callable[[SagaClient, Form], str]

MAX_BULK: Final = 100
"""The most requests one bulk answer may name (a queue page's worth)."""


@dataclass(frozen=True)
class BulkTarget:
    """One selected request, as its queue line drew it."""

    saga_id: str
    step_id: str
    kind: StepKind
    seen_version: int
    action_hash: str | None

    @classmethod
    def parse(cls, value: str) -> BulkTarget:
        """A line's "select" value (``saga|step|kind|version|hash``; InvalidRequest if not)."""
        parts = value.split("|")
        if len(parts) != 5 or not parts[0] or not parts[1] or not parts[3].isdigit() \
                or parts[2] not in StepKind._value2member_map_:
            raise InvalidRequest("a selected request must be saga|step|kind|version|hash, as "
                                 "the queue drew it: reload the queue")
        return cls(parts[0], parts[1], StepKind(parts[2]), int(parts[3]), parts[4] or None)


@dataclass(frozen=True)
class BulkOutcome:
    """What one request of a bulk answer came to: recorded, or why not."""

    target: BulkTarget
    recorded: bool
    message: str


def answer_each(client: SagaClient, targets: Sequence[BulkTarget], *, decision: str,
                reason: str) -> list[BulkOutcome]:
    """Approve or deny every target, one at a time, each bound to the version its line
    showed and checked by the server as a single answer (role, four eyes, expiry); one
    refusal stops nothing else."""
    outcomes = []
    for target in targets:
        try:
            if decision == "approve":
                client.approve(target.saga_id, target.step_id, kind=target.kind,
                               action_hash=target.action_hash, reason=reason,
                               seen_version=target.seen_version)
            else:
                client.deny(target.saga_id, target.step_id, kind=target.kind, reason=reason,
                            seen_version=target.seen_version)
        except SagaError as exc:
            outcomes.append(BulkOutcome(target, False, str(exc)))
        else:
            outcomes.append(BulkOutcome(target, True, "approved" if decision == "approve"
                                        else "denied"))
    return outcomes


def _bulk_targets(form: Form) -> list[BulkTarget]:
    values = form.all_of("item")
    if not values:
        raise InvalidRequest("select at least one request (the box at the start of its line)")
    if len(values) > MAX_BULK:
        raise InvalidRequest(f"answer at most {MAX_BULK} requests at once")
    return list(dict.fromkeys(BulkTarget.parse(value) for value in values))


def _bulk_page(outcomes: Sequence[BulkOutcome], decision: str) -> Markup:
    done = sum(1 for o in outcomes if o.recorded)
    rows = join(html('<tr class="{}"><td><a href="/sagas/{}"><code>{}</code></a></td>'
                     '<td>{} ({})</td><td>{}</td><td>{}</td></tr>',
                     "ok" if o.recorded else "refused", url_part(o.target.saga_id),
                     o.target.saga_id, o.target.step_id, o.target.kind,
                     o.target.seen_version, html("<b>{}</b>", o.message) if o.recorded
                     else html('<span class="error">not recorded: {}</span>', o.message))
                for o in outcomes)
    verb = "approve" if decision == "approve" else "deny"
    return html('<h1>Bulk {}: {} of {} recorded</h1><table class="bulk-results"><thead><tr>'
                '<th>saga</th><th>step</th><th>version shown</th><th>outcome</th></tr>'
                '</thead><tbody>{}</tbody></table><p><a href="/queue">Back to the queue</a>'
                '</p>', verb, done, len(outcomes), rows)


def routes(console: Console) -> list[BaseRoute]:
    """The action routes."""

    def endpoint(perform: Perform) -> Callable[[Request], Response]:
        def act(request: Request) -> Response:
            viewer = viewer_of(request)
            form = form_of(request)
            return_to = safe_next(form.text("return_to", "/queue") or "/queue").split("?")[0]
            try:
                done = perform(console.client(viewer), form)
            except SagaError as exc:
                return _refused(console, request, form, return_to, exc)
            query = urlencode({"done": done, "saga": form.text("saga_id")})
            return RedirectResponse(f"{return_to}?{query}", status_code=303)

        return act

    def bulk(request: Request) -> Response:
        viewer = viewer_of(request)
        form = form_of(request)
        decision = form.text("decision")
        if decision not in ("approve", "deny"):
            raise InvalidRequest("decision must be approve or deny (press one of the buttons)")
        outcomes = answer_each(console.client(viewer), _bulk_targets(form), decision=decision,
                               reason=_required(form, "reason"))
        refused = not any(o.recorded for o in outcomes)
        return console.page(request, "Bulk answer", _bulk_page(outcomes, decision),
                            status=409 if refused else 200)

    return [Route("/actions/approve", endpoint(_approve), methods=["POST"]),
            Route("/actions/bulk", bulk, methods=["POST"]),
            Route("/actions/deny", endpoint(_deny), methods=["POST"]),
            Route("/actions/decide", endpoint(_decide), methods=["POST"]),
            Route("/actions/resolve", endpoint(_resolve), methods=["POST"]),
            Route("/actions/cancel", endpoint(_cancel), methods=["POST"])]


def _refused(console: Console, request: Request, form: Form, return_to: str,
             exc: SagaError) -> Response:
    """Nothing was recorded: say why, and show the saga as the log has it now."""
    viewer = viewer_of(request)
    status = status_of(exc)
    note_error(request, exc)
    title = "Changed meanwhile" if isinstance(exc, SagaMoved) else "Not recorded"
    current = Markup("")
    saga_id = form.text("saga_id")
    if saga_id and exc.kind is not ErrorKind.NOT_FOUND:
        try:
            current = saga_state_box(console.client(viewer).status(saga_id))
        except SagaError:
            current = Markup("")
    body = html('<h1>{}</h1><p class="notice error" role="alert">{}</p>{}{}'
                '<p><a href="{}">Back to the page you came from</a> (it shows the saga as it '
                'is now).</p>', title, str(exc),
                html('<p class="hint">{}</p>', exc.hint) if exc.hint else "", current,
                return_to)
    return console.page(request, title, body, status=status)
