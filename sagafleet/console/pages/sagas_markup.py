"""The saga list page: its query (filters and cursors from the URL, checked) and its markup.

The URL is the whole state of the page (a GET form), so a filtered page can be bookmarked,
shared and reloaded; paging links carry the filters and one cursor (``older`` or ``newer``,
see :mod:`projections.saga_browse`). Every bad parameter is an ``InvalidArgument`` naming
the parameter, shown above the form with status 400.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from application.client import saga_id_for_key
from events.errors import InvalidArgument
from projections import BrowsePage, SagaCursor, SagaFilter
from projections.rows import SummaryRow
from projections.saga_browse import DEFAULT_STUCK_AFTER_S
from saga_core.contracts import SagaStatus
from saga_core.limits import KEY_CHARS, NAME_CHARS
from sagafleet.console.markup import Markup, html, join, url_part
from sagafleet.console.step_graph import state_class

DEFAULT_ROWS, MAX_ROWS = 50, 200
MAX_SUGGESTED = 200
"""Definition names the form suggests at most (agent plans may register many)."""
MAX_AGE = timedelta(days=36_500)
_AGE = re.compile(r"^\s*(\d{1,6})\s*([smhd])\s*$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_FIELDS = ("status", "definition", "older_than", "started_after", "started_before", "stuck",
           "stuck_minutes", "q", "limit")


@dataclass(frozen=True)
class ListQuery:
    """The list page's parameters as given (text, for the form) and as checked."""

    raw: Mapping[str, str]
    filters: SagaFilter
    limit: int
    older: SagaCursor | None
    newer: SagaCursor | None

    def link(self, **cursor: str) -> str:
        """This page's URL with its filters and the given cursor (``older=``/``newer=``)."""
        kept = {name: self.raw[name] for name in _FIELDS if self.raw.get(name)}
        return "/sagas?" + urlencode({**kept, **cursor}) if kept or cursor else "/sagas"


def _duration(name: str, text: str) -> timedelta:
    found = _AGE.match(text)
    if found is None:
        raise InvalidArgument(
            f"{name} is a number and a unit (s, m, h or d), like 15m or 2d")
    age = timedelta(seconds=int(found.group(1)) * _AGE_UNITS[found.group(2)])
    if age > MAX_AGE:
        raise InvalidArgument(f"{name} is at most {MAX_AGE.days} days")
    return age


def _moment(name: str, text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgument(
            f"{name} is a date and time like 2026-12-01T14:30 (UTC unless an offset is "
            "given)") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _cursor(name: str, text: str) -> SagaCursor:
    try:
        return SagaCursor.parse(text)
    except InvalidArgument:
        raise InvalidArgument(f"{name} is a page cursor as a paging link gives it") from None


def search_ids(tenant: str, text: str) -> tuple[str, ...]:
    """The saga ids a search can mean in ``tenant``: the text as a saga id, and the saga the
    tenant started with the text as its idempotency key."""
    value = text.strip()
    if len(value) > KEY_CHARS.value:
        raise InvalidArgument(f"a search is a saga id or an idempotency key of at most "
                              f"{KEY_CHARS.value} characters")
    return tuple(dict.fromkeys((value, saga_id_for_key(tenant, value))))


def parse_query(params: Mapping[str, str], *, tenant: str, now: datetime) -> ListQuery:
    """The list's filters, page size and cursor from the URL's parameters."""
    raw = {name: params.get(name, "") for name in (*_FIELDS, "older", "newer")}
    status = None
    if raw["status"]:
        try:
            status = SagaStatus(raw["status"])
        except ValueError:
            raise InvalidArgument(
                f"status is one of {', '.join(SagaStatus)}") from None
    definition = raw["definition"].strip() or None
    if definition is not None and len(definition) > NAME_CHARS.value:
        raise InvalidArgument(f"definition is a name of at most {NAME_CHARS.value} characters")
    started_before = _moment("started_before", raw["started_before"]) \
        if raw["started_before"] else None
    if raw["older_than"]:
        cutoff = now - _duration("older_than", raw["older_than"])
        started_before = min(cutoff, started_before) if started_before else cutoff
    started_after = _moment("started_after", raw["started_after"]) \
        if raw["started_after"] else None
    stuck_after = DEFAULT_STUCK_AFTER_S
    if raw["stuck_minutes"]:
        if not (raw["stuck_minutes"].isascii() and raw["stuck_minutes"].isdigit()
                and len(raw["stuck_minutes"]) <= 6):
            raise InvalidArgument("stuck_minutes is a whole number of minutes")
        stuck_after = int(raw["stuck_minutes"]) * 60.0
    limit = DEFAULT_ROWS
    if raw["limit"]:
        if not (raw["limit"].isascii() and raw["limit"].isdigit() and len(raw["limit"]) <= 4
                and 1 <= int(raw["limit"]) <= MAX_ROWS):
            raise InvalidArgument(f"limit is a page size from 1 to {MAX_ROWS}")
        limit = int(raw["limit"])
    filters = SagaFilter(
        status=status, definition=definition, started_after=started_after,
        started_before=started_before, stuck=raw["stuck"] in ("1", "on", "true"),
        stuck_after_s=stuck_after,
        saga_ids=search_ids(tenant, raw["q"]) if raw["q"].strip() else None)
    older = _cursor("older", raw["older"]) if raw["older"] else None
    newer = _cursor("newer", raw["newer"]) if raw["newer"] else None
    if older is not None and newer is not None:
        raise InvalidArgument("a page follows one cursor: older or newer, not both")
    return ListQuery(raw, filters, limit, older, newer)


def empty_query() -> ListQuery:
    """The unfiltered first page (what an invalid query falls back to)."""
    return ListQuery({}, SagaFilter(), DEFAULT_ROWS, None, None)


def without_bad_values(query: Mapping[str, str]) -> ListQuery:
    """The form's text kept as given (to show it back with the error), nothing applied."""
    return replace(empty_query(), raw={name: query.get(name, "") for name in _FIELDS})


def _options(chosen: str) -> Markup:
    choices = [("", "any state")] + [(str(s), str(s)) for s in SagaStatus]
    return join(html('<option value="{}"{}>{}</option>', value,
                     Markup(" selected") if value == chosen else Markup(""), label)
                for value, label in choices)


def render_form(query: ListQuery, definitions: Sequence[str] = ()) -> Markup:
    """The filter form (GET), showing back what was asked; ``definitions``: names to suggest."""
    raw = query.raw
    suggestions = join(html('<option value="{}">', name)
                       for name in sorted(set(definitions))[:MAX_SUGGESTED])
    return html(
        '<form class="filters" method="get" action="/sagas" role="search">'
        '<label>State <select name="status">{}</select></label>'
        '<label>Definition <input name="definition" value="{}" maxlength="{}" '
        'list="definition-names"></label><datalist id="definition-names">{}</datalist>'
        '<label>Older than <input name="older_than" value="{}" placeholder="15m, 2h, 3d" '
        'size="6"></label>'
        '<label>Started after <input type="datetime-local" name="started_after" '
        'value="{}"></label>'
        '<label>Started before <input type="datetime-local" name="started_before" '
        'value="{}"></label>'
        '<label class="check"><input type="checkbox" name="stuck" value="1"{}> Stuck</label>'
        '<label>Stuck after (minutes) <input name="stuck_minutes" value="{}" size="4" '
        'inputmode="numeric"></label>'
        '<label class="search">Saga id or idempotency key <input type="search" name="q" '
        'value="{}"></label>'
        '<button type="submit">Show</button> <a href="/sagas">Clear</a></form>',
        _options(raw.get("status", "")), raw.get("definition", ""), NAME_CHARS.value,
        suggestions,
        raw.get("older_than", ""), raw.get("started_after", ""),
        raw.get("started_before", ""),
        Markup(" checked") if raw.get("stuck") in ("1", "on", "true") else Markup(""),
        raw.get("stuck_minutes", "") or str(int(DEFAULT_STUCK_AFTER_S // 60)),
        raw.get("q", ""))


def _when(moment: datetime | None) -> Markup:
    if moment is None:
        return html("<span class=\"none\">—</span>")
    return html('<time datetime="{}">{}</time>', moment.isoformat(),
                moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"))


def is_stuck(saga: SummaryRow, filters: SagaFilter, now: datetime) -> bool:
    """Whether the list marks ``saga`` stuck: what the ``stuck`` filter selects, by ``now``."""
    return (not SagaStatus(saga.state).is_terminal
            and saga.updated_at < now - timedelta(seconds=filters.stuck_after_s))


def last_error(saga: SummaryRow, limit: int | None = None) -> Markup:
    """A saga's last error as shown: in red while it is a problem, marked recovered once its
    operation succeeded since (a reconciled timeout is history, not an alarm); "—" if none."""
    if not saga.last_error:
        return html('<span class="none">—</span>')
    text = saga.last_error[:limit] if limit is not None else saga.last_error
    if saga.last_error_recovered:
        return html('<span class="recovered" title="its operation succeeded since">'
                    'recovered: {}</span>', text)
    return html('<span class="error">{}</span>', text)


def _row(saga: SummaryRow, stuck: bool) -> Markup:
    steps = ", ".join(saga.current_steps)
    mark = html(' <span class="badge stuck" title="no progress for a while">stuck</span>') \
        if stuck else Markup("")
    return html(
        '<tr data-saga="{}"><td class="id"><a href="/sagas/{}">{}</a></td>'
        '<td>{} <span class="version">v{}</span></td>'
        '<td><span class="state {}">{}</span>{}</td><td>{}</td><td>{}</td><td>{}</td>'
        '<td class="last-error">{}</td></tr>',
        saga.saga_id, url_part(saga.saga_id), saga.saga_id, saga.definition_name,
        saga.definition_version, state_class(saga.state), saga.state, mark, steps,
        _when(saga.started_at), _when(saga.updated_at),
        last_error(saga, 200) if saga.last_error else "")


def render_page(page: BrowsePage, query: ListQuery, now: datetime) -> Markup:
    """The list's table and its paging links (``now``: to mark the stuck sagas)."""
    if page.sagas:
        table = html(
            '<table class="sagas"><thead><tr><th>Saga</th><th>Definition</th><th>State</th>'
            '<th>Current steps</th><th>Started (UTC)</th><th>Last change</th>'
            '<th>Last error</th></tr></thead><tbody>{}</tbody></table>',
            join(_row(s, is_stuck(s, query.filters, now)) for s in page.sagas))
    else:
        table = html('<p class="empty">No saga of tenant {} matches.</p>', page.tenant)
    links = []
    if page.newer is not None:
        links.append(html('<a rel="prev" href="{}">← Newer</a>',
                          query.link(newer=str(page.newer))))
    if query.older is not None or query.newer is not None:
        links.append(html('<a href="{}">Newest</a>', query.link()))
    if page.older is not None:
        links.append(html('<a rel="next" href="{}">Older →</a>',
                          query.link(older=str(page.older))))
    return html('{}<nav class="pager" aria-label="pages">{}</nav>', table,
                join(links, " · "))


def render_list(page: BrowsePage | None, query: ListQuery, error: str | None, *,
                live_url: str, now: datetime, definitions: Sequence[str] = ()) -> Markup:
    """The whole body of the list page (``page`` None: the query was refused); the table
    refreshes live from ``live_url`` (this page's own URL, answered with the table alone)."""
    problem = html('<p class="problem" role="alert">{}</p>', error) if error else Markup("")
    listing = (html('<section id="saga-list" data-live="{}">{}</section>', live_url,
                    render_page(page, query, now)) if page else Markup(""))
    return html(
        '<link rel="stylesheet" href="/static/sagas.css"><h1>Sagas '
        '<span class="live-status"></span></h1>{}{}'
        '<p class="hint">Stuck: not in a terminal state and no progress for the time given '
        '(the sagas the stuck-age metric and the risk alerts are about). The search looks up '
        'one saga of this tenant by its id or by the idempotency key it was started with.</p>'
        '{}', problem, render_form(query, definitions), listing)
