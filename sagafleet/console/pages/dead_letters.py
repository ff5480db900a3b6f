"""``/dead-letters``: agent commands that could never succeed — list, show, requeue, discard.

Each letter belongs to the tenant its message proved when it was kept
(``workers.dead_letters.tenants``), and answers only to it (``workers.dead_letters`` filters every
read and action by the signed-in principal): a principal whose roles allow dead letters
(``operator``) lists, opens and resolves its own tenant's letters; another tenant's letter is
"not found" (404), as one that never existed. A letter no tenant is proven to own (unsigned,
forged, malformed) shows only to the ``fleet_operator`` role. Everyone else is told how many
of its tenant's letters are open and which role would show them — never their content.

Requeue and discard are forms (CSRF-checked by the gate), each asking for a reason, done as
the signed-in principal through :class:`~workers.dead_letters.store.DeadLetters` (which checks the
permission again and resolves a letter once: a second click says it was already done).
"""

from __future__ import annotations

import json
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from saga_core.access.roles import Action, check_permitted
from saga_core.errors import ErrorKind, SagaError
from sagafleet.console.core import Console
from sagafleet.console.gate import form_of, viewer_of
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import Markup, csrf_field, html, join, pretty_json
from sagafleet.console.pages.health import STYLESHEET
from sagafleet.console.sessions import Viewer
from workers.dead_letters.store import DeadLetter, DeadLetterStatus, Resolution
from workers.tasks import republish

NAV = NavLink(40, "Dead letters", "/dead-letters")

LIST_LIMIT: Final = 500


class ReasonRequired(SagaError):
    """A requeue or discard from the console must say why (recorded on the letter)."""

    kind = ErrorKind.INVALID_INPUT


class BadLetterId(SagaError):
    """A dead letter's id in a path is a positive integer."""

    kind = ErrorKind.INVALID_INPUT


def _may_resolve(viewer: Viewer) -> bool:
    return Action.DEAD_LETTERS in viewer.principal.allowed()


def _letter_id(request: Request) -> int:
    raw = request.path_params["letter_id"]
    if not raw.isdigit() or len(raw) > 18:
        raise BadLetterId("a dead letter's id is a positive integer")
    return int(raw)


def _owner(letter: DeadLetter) -> Markup:
    """The letter's tenant, or a badge saying none is proven (the fleet operator's)."""
    if letter.tenant is None:
        return html('<span class="badge unknown-tenant" title="unsigned, forged or malformed: '
                    'no tenant is proven to own it">unknown</span>')
    return html('<code class="tenant">{}</code>', letter.tenant)


def _kind(letter: DeadLetter) -> str:
    kind = letter.error_kind or "?"
    return f"{kind}: {letter.refusal}" if letter.refusal else kind


def _list_body(console: Console, viewer: Viewer) -> Markup:
    if not _may_resolve(viewer):
        return html(
            '<p class="notice" role="status">{} open dead letter(s) of tenant {}. Only a '
            'principal with the <code>operator</code> role sees and resolves them (you hold: '
            '{}).</p>',
            console.fleet.dead_letters.open_count(viewer.principal), viewer.tenant,
            ", ".join(sorted(viewer.principal.roles)) or "no role")
    letters = console.fleet.dead_letters.open_letters(viewer.principal, limit=LIST_LIMIT)
    if not letters:
        return html('<p class="notice ok">No open dead letter of tenant {}.</p>', viewer.tenant)
    rows = join(
        html('<tr class="dead-letter" data-letter="{}"><td><a href="/dead-letters/{}">#{}</a>'
             '</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>',
             letter.id, letter.id, letter.id, _owner(letter), letter.task, _kind(letter),
             f"{letter.recorded_at:%Y-%m-%d %H:%M:%S}", letter.reason)
        for letter in letters)
    return html('<table class="dead-letters"><thead><tr><th>id</th><th>tenant</th><th>task</th>'
                '<th>kind</th><th>recorded</th><th>reason</th></tr></thead><tbody>{}</tbody>'
                '</table>', rows)


def _readable_envelope(letter: DeadLetter) -> Markup:
    envelope = letter.kwargs.get("envelope")
    if not isinstance(envelope, str):
        return Markup("")
    try:
        shown: object = json.loads(envelope)
    except (ValueError, RecursionError):
        shown = envelope
    return html('<dt>envelope</dt><dd>{}</dd>', pretty_json(shown))


def _actions(viewer: Viewer, letter: DeadLetter) -> Markup:
    if letter.status is not DeadLetterStatus.OPEN:
        return Markup("")
    form = ('<form method="post" action="/dead-letters/{id}/{action}" data-once '
            'class="{action}">{csrf}<label>reason <input type="text" name="reason" required '
            'maxlength="2000" placeholder="why"></label>'
            '<button type="submit" class="{css}">{label}</button></form>')
    return html('<div class="actions">{}{}</div>',
                html(form, id=letter.id, action="requeue", csrf=csrf_field(viewer),
                     css="primary", label="Requeue"),
                html(form, id=letter.id, action="discard", csrf=csrf_field(viewer),
                     css="danger", label="Discard"))


def _letter_body(viewer: Viewer, letter: DeadLetter, notice: Markup) -> Markup:
    message = (html('<dt>body (truncated, from before whole messages were kept)</dt>'
                    '<dd><pre class="json">{}</pre></dd>', letter.body or "")
               if letter.message is None else
               html('<dt>args</dt><dd>{}</dd><dt>kwargs</dt><dd>{}</dd>{}',
                    pretty_json(letter.args), pretty_json(letter.kwargs),
                    _readable_envelope(letter)))
    resolution = (html('<dt>resolved</dt><dd>{} by {} at {}: {}</dd>', letter.status,
                       letter.resolved_by, f"{letter.resolved_at:%Y-%m-%d %H:%M:%S}",
                       letter.resolution)
                  if letter.resolved_at is not None else Markup(""))
    return html(
        '{}<p><a href="/dead-letters">← dead letters</a></p><h1>Dead letter #{}</h1>{}'
        '<dl class="letter"><dt>status</dt><dd><span class="badge status-{}">{}</span></dd>'
        '<dt>tenant</dt><dd>{}</dd>'
        '<dt>task</dt><dd><code>{}</code></dd><dt>task id</dt><dd><code>{}</code></dd>'
        '<dt>kind</dt><dd>{}</dd><dt>recorded</dt><dd>{}</dd><dt>reason</dt><dd>{}</dd>'
        '{}{}</dl>{}',
        STYLESHEET, letter.id, notice, letter.status, letter.status, _owner(letter), letter.task,
        letter.task_id or "—", _kind(letter), f"{letter.recorded_at:%Y-%m-%d %H:%M:%S}",
        letter.reason, message, resolution, _actions(viewer, letter))


def _outcome(action: str, resolution: Resolution) -> Markup:
    letter = resolution.letter
    if resolution.changed:
        return html('<p class="notice ok" role="status">Dead letter #{} {} by you.</p>',
                    letter.id, letter.status)
    return html('<p class="notice" role="status">Dead letter #{} was already {} by {} at {}; '
                'nothing was done again.</p>', letter.id, letter.status, letter.resolved_by,
                f"{letter.resolved_at:%Y-%m-%d %H:%M:%S}" if letter.resolved_at else "?")


def routes(console: Console) -> list[BaseRoute]:
    """The list, one letter, and its two actions."""
    letters = console.fleet.dead_letters

    def list_page(request: Request) -> Response:
        viewer = viewer_of(request)
        body = html('{}<h1>Dead letters</h1><p class="hint">Agent commands that could never '
                    'succeed, kept whole; requeue one once its cause is fixed, or discard it '
                    'saying why.</p>{}', STYLESHEET, _list_body(console, viewer))
        return console.page(request, "Dead letters", body, current="/dead-letters")

    def letter_page(request: Request) -> Response:
        viewer = viewer_of(request)
        check_permitted(viewer.principal, Action.DEAD_LETTERS, "dead letters")
        letter = letters.get(_letter_id(request), viewer.principal)
        return console.page(request, f"Dead letter #{letter.id}",
                            _letter_body(viewer, letter, Markup("")),
                            current="/dead-letters")

    def act(action: str) -> Route:
        def endpoint(request: Request) -> Response:
            viewer = viewer_of(request)
            letter_id = _letter_id(request)
            reason = form_of(request).text("reason")
            if not reason:
                raise ReasonRequired(f"say why you {action} dead letter {letter_id}")
            if action == "requeue":
                resolution = letters.requeue(letter_id, viewer.principal, reason,
                                             lambda letter: republish(console.fleet.celery,
                                                                      letter))
            else:
                resolution = letters.discard(letter_id, viewer.principal, reason)
            body = _letter_body(viewer, resolution.letter, _outcome(action, resolution))
            return console.page(request, f"Dead letter #{letter_id}", body,
                                current="/dead-letters")

        return Route(f"/dead-letters/{{letter_id}}/{action}", endpoint, methods=["POST"])

    return [Route("/dead-letters", list_page, methods=["GET"]),
            Route("/dead-letters/{letter_id}", letter_page, methods=["GET"]),
            act("requeue"), act("discard")]
