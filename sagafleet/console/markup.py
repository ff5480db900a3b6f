"""Safe HTML by construction: every page is built from :class:`Markup`, never from ``str``.

``html(template, *values)`` formats a literal template with values that are escaped unless
they are already Markup (markupsafe's rule), so a saga's input, a tool's receipt or an
agent's reason can only ever land in a page as text. The response helpers
(:mod:`sagafleet.console.layout`) accept nothing but Markup: handing them a ``str`` built
with an f-string is a ``TypeError`` at once (and a mypy error before that).

Rules for page authors:

* build with ``html("<td>{}</td>", value)``; never ``Markup(f"...{value}...")`` and never
  ``Markup(value)`` on anything that did not come from this package's code;
* attributes are quoted in the template (``<a href="/sagas/{}">``): escaping covers quotes;
  a value used in a URL path goes through :func:`url_part`;
* no ``style=`` attributes and no inline ``<script>``: the Content-Security-Policy refuses
  them; use classes from ``static/console.css`` and behaviour from ``static/console.js``;
* JSON shown to a person goes through :func:`pretty_json` (escaped inside ``<pre>``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import quote

from markupsafe import Markup, escape

__all__ = ["Markup", "csrf_field", "escape", "html", "join", "pretty_json", "url_part"]


class HasCsrf(Protocol):
    """A signed-in viewer (:class:`sagafleet.console.sessions.Viewer`)."""

    @property
    def csrf(self) -> str:
        """The session's synchronizer token."""
        ...


def html(template: str, *values: Any, **named: Any) -> Markup:
    """``template`` (trusted: a literal in this package) with every value escaped."""
    if not isinstance(template, str):
        raise TypeError("html() takes a literal template string")
    return Markup(template).format(*values, **named)


def join(parts: Iterable[Markup | str], separator: str = "") -> Markup:
    """Concatenate fragments; plain strings among them are escaped."""
    return Markup(separator).join(escape(part) for part in parts)


def url_part(value: object) -> str:
    """``value`` percent-encoded for one URL path segment or query value (then escaped by
    :func:`html` as any other value)."""
    return quote(str(value), safe="")


def pretty_json(value: object) -> Markup:
    """``value`` as indented JSON inside ``<pre class="json">``, escaped."""
    text = json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    return html('<pre class="json">{}</pre>', text)


def csrf_field(viewer: HasCsrf) -> Markup:
    """The hidden input every POST form carries (the gate refuses a form without it)."""
    return html('<input type="hidden" name="csrf" value="{}">', viewer.csrf)
