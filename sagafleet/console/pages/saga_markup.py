"""The saga page's markup: header, the wait for a person, what is at risk, the replay form,
the graph, the steps with their receipts, approvals, budget and stops, and the audited
timeline.

Every value shown came from the log (an agent's input, a tool's receipt, an operator's
reason) and goes through :func:`sagafleet.console.markup.html`, so it lands as text.
"""

from __future__ import annotations

from datetime import UTC, datetime

from projections import BudgetStanding, TimelineEntry
from projections.rows import QueueRow, StepRunRow
from saga_core.contracts import SagaStatus
from saga_core.engine.state import error_recovered
from sagafleet.console.markup import Markup, html, join, pretty_json, url_part
from sagafleet.console.pages.saga_reading import ApprovalLine, SagaDetail
from sagafleet.console.pages.sagas_markup import last_error
from sagafleet.console.step_graph import NOT_RUN, NOT_STARTED, state_class, step_graph

NOTHING = Markup("")
"""An empty part of a page."""
QUEUE_PATH = "/queue"
"""The queue page (sagafleet.console.pages.queue); items are anchored by :func:`queue_anchor`."""


def queue_anchor(entry: QueueRow) -> str:
    """The id of a queue item's element on the queue page."""
    return f"q-{entry.saga_id}-{entry.entry}-{entry.step_id}-{entry.kind}"


def _when(moment: datetime | None) -> Markup:
    if moment is None:
        return html('<span class="none">—</span>')
    return html('<time datetime="{}">{}</time>', moment.isoformat(),
                moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"))


def _header(d: SagaDetail) -> Markup:
    s = d.summary
    return html(
        '<h1>Saga <code class="saga-id">{}</code> <span class="state {}">{}</span></h1>'
        '<dl class="facts"><dt>Definition</dt><dd>{} v{} <code class="hash" title="{}">{}</code>'
        '</dd><dt>Tenant</dt><dd>{}</dd><dt>Phase</dt><dd>{}</dd>'
        '<dt>Started</dt><dd>{}</dd><dt>Last change</dt><dd>{}</dd>'
        '<dt>Finished</dt><dd>{}</dd><dt>Events</dt><dd>{} (stream version {})</dd>'
        '<dt>Last error</dt><dd class="last-error">{}</dd></dl>',
        d.saga_id, state_class(s.state), s.state, s.definition_name, s.definition_version,
        s.definition_hash, s.definition_hash[:12], s.tenant, s.phase, _when(s.started_at),
        _when(s.updated_at), _when(s.finished_at), d.history.events_total, s.stream_version,
        last_error(s))


def _waiting(d: SagaDetail) -> Markup:
    if d.at is not None or not d.queue:
        return Markup("")
    items = join(
        html('<li>{} for step <code>{}</code> ({}): {} <a class="to-queue" href="{}#{}">'
             'Open in the queue</a></li>',
             "Approval" if q.entry == "approval" else "Manual intervention", q.step_id, q.kind,
             q.reason, QUEUE_PATH, queue_anchor(q))
        for q in d.queue)
    return html('<section class="waiting" id="waiting"><h2>Waiting for a person</h2>'
                '<ul>{}</ul></section>', items)


def _at_risk(d: SagaDetail) -> Markup:
    if not d.alerts:
        return Markup("")
    items = join(html('<li class="alert {}"><b>{}</b> {}: {} <span class="since">since {}'
                      '</span></li>', a.severity, a.severity, a.kind.replace("_", " "),
                      a.message, _when(a.since)) for a in d.alerts)
    return html('<section class="at-risk" id="at-risk"><h2>At risk</h2><ul>{}</ul>'
                '</section>', items)


def _replay_form(d: SagaDetail) -> Markup:
    first = d.history.timeline[0].global_position
    banner = Markup("")
    if d.at is not None:
        shown = sum(1 for e in d.history.timeline if d.included(e))
        banner = html(
            '<p class="as-of" role="status">Showing the state as of log position <b>{}</b>: '
            '{} of {} events folded (replayed from the log by the audit). '
            '<a href="/sagas/{}">Back to now</a></p>',
            str(d.at), shown, d.history.events_total, url_part(d.saga_id))
    return html(
        '{}<form class="replay" id="replay" method="get" action="/sagas/{}">'
        '<label>State as of log position <input name="at" value="{}" inputmode="numeric" '
        'placeholder="{}…{}"></label> <button type="submit">Replay</button>'
        '<span class="hint"> N (global position, {} to {}) or XID:N; or pick an event '
        'below.</span></form>',
        banner, url_part(d.saga_id), str(d.at) if d.at is not None else "", first,
        d.last_position, first, d.last_position)


def _graph(d: SagaDetail) -> Markup:
    unreached = _unreached(d)
    states = {(row.step_id, row.kind): unreached if row.status == NOT_STARTED else row.status
              for row in d.steps}
    caption = f"Steps and compensations of {d.definition.name} v{d.definition.version}"
    return html('<section id="graph"><h2>Dependency graph</h2>{}</section>',
                step_graph(d.definition, states, caption=caption, unreached=unreached))


def _step_row(row: StepRunRow, unreached: str) -> Markup:
    error = Markup("")
    if row.error_message and error_recovered(row.status):
        error = html('<span class="recovered" title="the operation succeeded since">'
                     'recovered from {}: {}</span>', row.error_class or "error",
                     row.error_message)
    elif row.error_message:
        error = html('<span class="error">{}: {}</span>', row.error_class or "error",
                     row.error_message)
    receipt = (pretty_json(row.receipt) if row.receipt is not None
               else Markup("") if row.error_message else html('<span class="none">—</span>'))
    return html(
        '<tr id="step-{}-{}"><td><code>{}</code></td><td>{}</td><td>{} v{}</td><td>{}</td>'
        '<td><span class="state {}">{}</span></td><td>{}</td>'
        '<td><code class="key" title="{}">{}</code></td><td>{}{}</td><td>{}</td></tr>',
        row.step_id, row.kind, row.step_id, row.kind, row.tool, row.tool_version,
        row.semantics, *_shown_state(row.status, unreached), row.attempts,
        row.operation_key, row.operation_key[:16], receipt, error, _when(row.changed_at))


def _shown_state(status: str, unreached: str) -> tuple[str, str]:
    """A row's state class and text: an operation not reached shows as the graph shows it."""
    shown = unreached if status == NOT_STARTED else status
    return state_class(shown), shown


def _unreached(d: SagaDetail) -> str:
    # A finished saga will never reach what it has not reached: that is "not run", not
    # "pending".
    return NOT_RUN if SagaStatus(d.summary.state).is_terminal else NOT_STARTED


def _steps(d: SagaDetail) -> Markup:
    shown = {(r.step_id, r.kind) for r in d.steps}
    unreached = [s.id for s in d.definition.steps if (s.id, "forward") not in shown]
    note = (html('<p class="hint">Not reached yet: {}</p>', ", ".join(unreached))
            if unreached else Markup(""))
    return html(
        '<section id="steps"><h2>Steps, compensations and receipts</h2><table class="steps">'
        '<thead><tr><th>Step</th><th>Operation</th><th>Tool</th><th>Semantics</th>'
        '<th>State</th><th>Attempts</th><th>Operation key</th><th>Receipt / error</th>'
        '<th>Changed</th></tr></thead><tbody>{}</tbody></table>{}</section>',
        join(_step_row(r, _unreached(d)) for r in d.steps), note)


def _approval_row(a: ApprovalLine) -> Markup:
    who = html('<span class="principal">{}</span>', a.approver) if a.approver else Markup("—")
    return html(
        '<tr class="approval {}"><td>{}</td><td><code>{}</code> ({})</td><td>{}</td><td>{}</td>'
        '<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code title="{}">{}</code></td></tr>',
        a.outcome, _when(a.at), a.step_id, a.kind, a.outcome, who, a.principal_kind or "—",
        ", ".join(a.roles) or "—", a.authenticated or "—", a.detail, a.action_hash,
        a.action_hash[:12])


def _approvals(d: SagaDetail) -> Markup:
    if not d.approvals:
        body = html('<p class="empty">No approval was requested{}.</p>',
                    " by then" if d.at is not None else "")
    else:
        body = html(
            '<table class="approvals"><thead><tr><th>When</th><th>Step</th><th>Event</th>'
            '<th>Who</th><th>Kind</th><th>Roles</th><th>Authenticated</th><th>Detail</th>'
            '<th>Action hash</th></tr></thead><tbody>{}</tbody></table>',
            join(_approval_row(a) for a in d.approvals))
    return html('<section id="approvals"><h2>Approvals</h2>{}</section>', body)


def _budget(b: BudgetStanding | None) -> Markup:
    if b is None:
        return Markup("")
    limits = []
    if b.time_limit_s is not None:
        limits.append(html("<dt>Time limit</dt><dd>{} s</dd>", f"{b.time_limit_s:g}"))
    if b.max_cost is not None:
        limits.append(html("<dt>Cost budget</dt><dd>{} (spent {})</dd>", f"{b.max_cost:g}",
                           b.spent))
    if b.on_exceeded is not None:
        limits.append(html("<dt>When exceeded</dt><dd>{}</dd>", b.on_exceeded))
    breach = (html('<dt>Stopped by</dt><dd class="error">{} limit: {}{}</dd>', b.breach,
                   b.breach_reason or "", " (lifted by a person)" if b.lifted else "")
              if b.breach else Markup(""))
    return html(
        '<section id="budget"><h2>Budgets and stops</h2><dl class="facts">'
        '<dt>Retry budget left</dt><dd>{}</dd>{}{}{}'
        '<dt>Cancel requested</dt><dd>{}</dd></dl></section>',
        b.retry_budget_left,
        html("<dt>Cost spent</dt><dd>{}</dd>", b.spent) if b.max_cost is None else Markup(""),
        join(limits), breach,
        "yes" if b.cancel_requested else "no")


def _event_row(d: SagaDetail, e: TimelineEntry) -> Markup:
    mark = d.chain_mark(e)
    later = "" if d.included(e) else " later"
    return html(
        '<tr class="event{}" id="v{}"><td>{}</td><td><a href="/sagas/{}?at={}" '
        'title="state as of this event">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
        '<td class="chain chain-{}" title="{}">{}</td><td><code title="{}">{}</code></td>'
        '<td><details><summary>data</summary>{}</details></td></tr>',
        later, e.stream_version, e.stream_version, url_part(d.saga_id), e.global_position,
        e.global_position, _when(e.at), e.type,
        f"{e.step_id} ({e.kind})" if e.step_id else "", e.actor or "",
        mark.verdict, mark.reason, mark.verdict, e.event_hash, e.event_hash[:12],
        pretty_json(e.data))


def _timeline(d: SagaDetail) -> Markup:
    h = d.history
    if h.chain_ok:
        verdict = html('<p class="chain-verdict chain-ok">Hash chain intact: each of the {} '
                       'events hashes its content and its predecessor\'s hash.</p>',
                       h.events_total)
    else:
        verdict = html('<p class="chain-verdict chain-broken" role="alert">Hash chain BROKEN '
                       'at {}: the history from there on was edited or is missing.</p>',
                       h.chain_break or "?")
    # What verify would also say of this saga: its snapshot, the checkpoints bearing on it.
    problems = ([f"snapshot refused: {h.snapshot_problem}"] if h.snapshot_problem else []) + (
        [f"{f.problem}: {f.message}" for f in h.anchors.findings] if h.anchors else [])
    if problems:
        verdict = html('{}<div class="chain-verdict chain-broken" role="alert">Integrity '
                       'findings:<ul>{}</ul></div>', verdict,
                       join(html('<li>{}</li>', problem) for problem in problems))
    return html(
        '<section id="timeline"><h2>Timeline (audit)</h2>{}<table class="timeline"><thead><tr>'
        '<th>v</th><th>Position</th><th>At</th><th>Event</th><th>Step</th><th>Actor</th>'
        '<th>Chain</th><th>Hash</th><th></th></tr></thead><tbody>{}</tbody></table></section>',
        verdict, join(_event_row(d, e) for e in h.timeline))


def render_saga_live(d: SagaDetail, *, context: Markup = NOTHING,
                     gantt: Markup = NOTHING) -> Markup:
    """Everything below the crumbs (the live fragment: it is refreshed as the saga moves,
    and the part a person is typing in, the replay form, is kept as it is); ``context``
    (who started it, why, lineage, input) follows the header, ``gantt`` the graph."""
    return html('{}{}{}{}{}{}{}{}{}{}{}', _header(d), context, _waiting(d), _at_risk(d),
                _replay_form(d), _graph(d), gantt, _steps(d), _approvals(d),
                _budget(d.as_of.budget), _timeline(d))


def render_saga(d: SagaDetail, *, context: Markup = NOTHING,
                gantt: Markup = NOTHING) -> Markup:
    """The whole body of the saga page; refreshed live unless it shows a past position."""
    live = (html(' data-live="/sagas/{}"', url_part(d.saga_id)) if d.at is None
            else Markup(""))
    return html(
        '<link rel="stylesheet" href="/static/sagas.css">'
        '<p class="crumbs"><a href="/sagas">Sagas</a> <span class="live-status"></span> '
        '<a class="export" href="/sagas/{}/export.json" download>Export history (JSON)</a></p>'
        '<div id="saga-live"{}>{}</div>', url_part(d.saga_id), live,
        render_saga_live(d, context=context, gantt=gantt))


def render_not_found(saga_id: str) -> Markup:
    """The body for a saga this tenant has not got (the same whether it exists elsewhere)."""
    return html('<link rel="stylesheet" href="/static/sagas.css"><h1>Not found</h1>'
                '<p>No saga <code>{}</code> here. <a href="/sagas">All sagas</a></p>', saga_id)
