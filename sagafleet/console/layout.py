"""The page frame every console page shares: header, navigation, who is signed in, sign-out.

Only :class:`~markupsafe.Markup` goes in (see :mod:`sagafleet.console.markup`); a ``str`` body
is a ``TypeError``, so text that was never escaped cannot reach a response by accident.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from starlette.responses import HTMLResponse

from sagafleet.console.markup import Markup, csrf_field, html, join
from sagafleet.console.sessions import Viewer

__all__ = ["NavLink", "fragment_response", "page_response", "sign_in_frame"]


@dataclass(frozen=True, order=True)
class NavLink:
    """One entry of the navigation bar: a page module's ``NAV`` (sorted by ``order``)."""

    order: int
    label: str
    path: str


def _checked(body: object) -> Markup:
    if not isinstance(body, Markup):
        raise TypeError("a console response takes Markup built with markup.html(); got "
                        f"{type(body).__name__} (was a value left unescaped?)")
    return body


def _document(title: str, header: Markup, body: Markup, refresh_to: str | None = None) -> Markup:
    # refresh_to: a page that moves on by itself (after single sign-on: see sso.routes).
    refresh = html('<meta http-equiv="refresh" content="0;url={}">', refresh_to) \
        if refresh_to else Markup("")
    return html(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{}'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>{} · sagafleet</title>'
        '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script></head>'
        '<body>{}<main id="main">{}</main></body></html>',
        refresh, title, header, body)


def _navigation(viewer: Viewer, nav: Sequence[NavLink], current: str) -> Markup:
    links = join(
        html('<a href="{}"{}>{}</a>', link.path,
             Markup(' aria-current="page" class="current"') if link.path == current
             else Markup(""), link.label)
        for link in sorted(nav))
    principal = viewer.principal
    return html(
        '<header class="bar"><a class="brand" href="/">sagafleet</a><nav>{}</nav>'
        '<div class="who"><span class="principal" title="roles: {}">{} · tenant {}</span>'
        '<form method="post" action="/sign-out">{}<button type="submit">Sign out</button>'
        '</form></div></header>',
        links, ", ".join(sorted(principal.roles)), principal.name, principal.tenant,
        csrf_field(viewer))


def page_response(viewer: Viewer, nav: Sequence[NavLink], title: str, body: Markup, *,
                  current: str = "", status: int = 200) -> HTMLResponse:
    """A whole page: the frame around ``body`` for ``viewer``."""
    document = _document(title, _navigation(viewer, nav, current), _checked(body))
    return HTMLResponse(str(document), status_code=status)


def fragment_response(body: Markup, *, status: int = 200) -> HTMLResponse:
    """A piece of a page (what the live script swaps in), no frame."""
    return HTMLResponse(str(_checked(body)), status_code=status)


def sign_in_frame(title: str, body: Markup, *, status: int = 200,
                  refresh_to: str | None = None) -> HTMLResponse:
    """A page for someone not signed in (the sign-in form, its refusals); ``refresh_to``: a
    path of this site the page moves on to at once."""
    header = html('<header class="bar"><span class="brand">sagafleet</span></header>')
    return HTMLResponse(str(_document(title, header, _checked(body), refresh_to)),
                        status_code=status)
