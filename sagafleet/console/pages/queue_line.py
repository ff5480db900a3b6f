"""One queue request as one line, the decision in words: who asks, what, how much, why a
person is asked, how much time is left, and Approve / Deny with a reason right there.

The line draws only what can work for the person looking: no Approve for the saga's own
starter when the gate keeps starters out (four eyes: the line says so instead), no answer
at all for a principal whose kind or roles cannot give one (the page says why once). The
one form carries both answers (``POST /actions/decide``, its two buttons name the
decision), bound to the saga version the line was drawn from; pressing Enter in the reason
submits nothing (the form's default button is disabled), so a decision is always a button.

The time left is text the server writes (``12 min left``), which the page's script keeps
counting down from the ``<time datetime>`` it sits in; without the script it stays as
drawn, with the absolute expiry beside it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

from saga_core.limits import REASON_CHARS
from sagafleet.console.actions import may_approve, may_deny
from sagafleet.console.amounts import format_amount
from sagafleet.console.markup import Markup, csrf_field, html, join, url_part
from sagafleet.console.pages.queue_items import QueueItem
from sagafleet.console.sessions import Viewer

__all__ = ["bulk_value", "gate_reason_text", "render_line", "time_left_text"]

GENERIC_REASON: Final = "the definition's approval policy applies"
"""What a gate says when only the definition asks for a person: shown only when nothing more
specific was said."""
_ABOVE: Final = re.compile(r"\b(?P<arg>[A-Za-z_][\w.]*) is above (?P<limit>\d+(?:\.\d+)?)\b")


def time_left_text(deadline: datetime | None, now: datetime) -> str:
    """How long until ``deadline``, as a person reads it at a glance: ``45 s left``,
    ``12 min left``, ``3 h 5 min left``, ``2 d 4 h left``, ``expired 3 min ago``,
    ``no deadline``."""
    if deadline is None:
        return "no deadline"
    seconds = int((deadline - now).total_seconds())
    past = seconds < 0
    span = _span(abs(seconds))
    return f"expired {span} ago" if past else f"{span} left"


def _span(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def gate_reason_text(reasons: tuple[str, ...] | list[str], fallback: str, *,
                     amount_arg: str | None, currency: str | None) -> str:
    """Why a person is asked, in the gate's own words, with the amount limit written in the
    request's currency when the gate judged that amount (``amount is above €1,000.00``);
    ``fallback`` (the queue row's reason) when the gate gave no reason. The generic
    "approval policy applies" is left out beside a specific reason."""
    specific = [reason for reason in reasons if reason != GENERIC_REASON]
    reasons = specific or list(reasons)
    if not reasons:
        return fallback

    def money(found: re.Match[str]) -> str:
        if amount_arg is None or currency is None or found.group("arg") != amount_arg:
            return found.group(0)
        limit = format_amount(float(found.group("limit")), currency)
        return f"{found.group('arg')} is above {limit}"

    return "; ".join(_ABOVE.sub(money, reason.removeprefix("catalogue gate: "))
                     for reason in reasons)


def bulk_value(item: QueueItem) -> str:
    """What a line's "select" box posts to ``/actions/bulk``: the request and the version
    it was drawn from (saga|step|kind|version|action hash)."""
    row = item.row
    version = "" if item.seen_version is None else str(item.seen_version)
    return "|".join((row.saga_id, row.step_id, row.kind, version, row.action_hash or ""))


def _what(item: QueueItem) -> Markup:
    row = item.row
    step = html("<code>{}</code>", row.step_id) if row.step_id else Markup("the saga")
    tool = item.intended_action.rsplit(": ", 1)[-1] if ": " in item.intended_action else ""
    return html('<span class="what">{} · {}{}{}</span>', item.definition_label, step,
                html(" ({})", row.kind) if row.kind == "compensation" else "",
                html(" · <code>{}</code>", tool) if tool else "")


def _how_much(item: QueueItem) -> Markup:
    money = item.money
    if money is not None:
        return html('<span class="how-much" title="{} {} in minor units">{}</span>',
                    item.gate.amount_arg if item.gate else "", money.minor, str(money))
    gate = item.gate
    if gate is not None and gate.amount_arg and gate.amount is not None:
        return html('<span class="how-much">{} {}</span>', gate.amount_arg,
                    format_amount(gate.amount, None))
    return Markup("")


def _who(item: QueueItem) -> Markup:
    context = item.context
    if context is None or not context.starter:
        return Markup("")
    return html('<span class="who">asked by <b>{}</b></span>', context.starter_text)


def _countdown(item: QueueItem, now: datetime) -> Markup:
    deadline = item.row.deadline
    if deadline is None:
        return html('<span class="countdown muted">no deadline</span>')
    at = deadline.astimezone(UTC)
    return html('<time class="countdown{}" datetime="{}" title="{} at {} UTC">{}</time>',
                " urgent" if item.urgent else "", at.isoformat(),
                "expires" if item.is_approval else "deadline", at.strftime("%Y-%m-%d %H:%M"),
                time_left_text(deadline, now))


def _decide_form(viewer: Viewer, item: QueueItem, *, approve: bool, deny: bool,
                 return_to: str) -> Markup:
    row = item.row
    ident = f"l-{row.saga_id[:8]}-{row.step_id}-{row.kind}"
    hidden = html(
        '{}<input type="hidden" name="saga_id" value="{}"><input type="hidden" name="step" '
        'value="{}"><input type="hidden" name="kind" value="{}"><input type="hidden" '
        'name="action_hash" value="{}"><input type="hidden" name="seen_version" '
        'value="{}"><input type="hidden" name="return_to" value="{}">',
        csrf_field(viewer), row.saga_id, row.step_id, row.kind, row.action_hash or "",
        "" if item.seen_version is None else item.seen_version, return_to)
    buttons = join([
        html('<button type="submit" name="decision" value="approve" class="primary">'
             'Approve</button>') if approve else Markup(""),
        html('<button type="submit" name="decision" value="deny" class="danger">Deny'
             '</button>') if deny else Markup("")])
    form_id = f"decide-{row.saga_id}-{row.step_id}-{row.kind}"
    return html(
        # The form's default button comes first in the document and is disabled, so Enter in
        # the reason submits nothing; it sits outside the form, so a look for the form's
        # buttons finds Approve and Deny.
        '<button type="submit" form="{}" class="default-guard" disabled hidden tabindex="-1">'
        '</button><form method="post" action="/actions/decide" class="decide{}" id="{}" '
        'data-once>{}<label class="sr-only" for="{}-reason">Reason for {} {}</label>'
        '<input id="{}-reason" type="text" name="reason" required maxlength="{}" '
        'placeholder="reason" autocomplete="off">{}</form>',
        form_id, " approve" if approve else "", form_id, hidden, ident, row.step_id,
        row.saga_id[:8], ident, REASON_CHARS.value, buttons)


def _answer(viewer: Viewer, item: QueueItem, return_to: str) -> Markup:
    """The line's answer: the decide form, or why there is none for this person."""
    if not item.is_approval:
        return html('<span class="muted why-not">resolve or cancel below (evidence)</span>')
    principal = viewer.principal
    role = item.gate.role if item.gate else None
    approve = may_approve(principal, role)
    deny = may_deny(principal, role)
    starter = item.starter_excluded(principal.name)
    note = Markup("")
    if approve and starter:
        approve = False
        note = html('<span class="why-not" role="note">You started this saga: four eyes '
                    'asks another {} to approve it.</span>', role or "approver")
    if not (approve or deny):
        return note
    return _decide_form(viewer, item, approve=approve, deny=deny, return_to=return_to) + note


def render_line(viewer: Viewer, item: QueueItem, now: datetime, *, anchor: str,
                selectable: bool, claim: Markup, evidence: Markup,
                return_to: str = "/queue") -> Markup:
    """One request as one line (and its evidence one click away, in ``<details>``)."""
    row = item.row
    entry = "approval" if item.is_approval else "manual intervention"
    why = gate_reason_text(item.gate.reasons if item.gate else (), row.reason,
                           amount_arg=item.gate.amount_arg if item.gate else None,
                           currency=item.money.currency if item.money else None)
    select = html('<input type="checkbox" class="select" name="item" value="{}" form="bulk" '
                  'aria-label="select {} {}">', bulk_value(item), row.saga_id[:8],
                  row.step_id) if selectable else Markup("")
    return html(
        '<article class="card queue-item line-item" id="{}" data-saga="{}" data-step="{}" '
        'data-entry="{}"><div class="line">{}<div class="ask">'
        '<span class="badge">{}</span>{}{}{}{}<span class="why">{}</span>{}{}</div>'
        '<div class="answer">{}</div></div>'
        '<details class="evidence"><summary>Evidence and context</summary>'
        '<p class="saga-link">Saga <a class="saga" href="/sagas/{}"><code>{}</code></a></p>'
        '{}</details></article>',
        anchor, row.saga_id, row.step_id, row.entry, select, entry,
        html('<span class="badge urgent">urgent</span>') if item.urgent else "",
        _what(item), _how_much(item), _who(item), why, _countdown(item, now), claim,
        _answer(viewer, item, return_to), url_part(row.saga_id), row.saga_id, evidence)
