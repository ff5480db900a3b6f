"""The operator console: ``sagafleet console`` serves server-rendered pages over Starlette.

How to add a page (the contract every page module keeps; it stays stable):

* Add a module under ``sagafleet/console/pages/`` defining
  ``routes(console: Console) -> list[starlette.routing.BaseRoute]`` and, to appear in the
  navigation, ``NAV = NavLink(order, "Label", "/path")`` (queue 10, sagas 20, health 30,
  dead letters 40, workers 50). :func:`sagafleet.console.app.create_app` finds it; nothing
  else to register. Endpoints may be plain ``def`` (Starlette runs them in a thread: the
  read side and the client are blocking) or ``async def``.
* Every path but ``/sign-in`` and ``/static/`` is signed in by the gate before the page runs
  (:mod:`sagafleet.console.gate`). The principal: ``viewer = viewer_of(request)``;
  ``viewer.principal`` (a ``saga_core.access.roles.Principal``: tenant, name, kind, roles) and
  ``viewer.tenant``.
* Read: ``console.read`` is the read side (a ``projections.ProjectionContext``: read models and
  the log). Always pass ``tenant=viewer.tenant`` to the projections' readers; a saga of another
  tenant must look exactly like a saga that does not exist (404).
* Act: ``console.client(viewer)`` is the ``application.client.SagaClient`` acting as the
  principal: the same calls and the same server-side permission checks as the CLI
  (``sagafleet/commands/operator.py``). Never decide permissions in a page; to hide a button
  ask ``viewer.principal.allowed()`` / ``has_role`` (the server refuses anyway).
* Forms: ``method="post"``, ``application/x-www-form-urlencoded`` (the default), carrying
  ``csrf_field(viewer)``; the gate has already checked the token when the endpoint runs, and
  ``form_of(request)`` gives the fields. Other bodies are refused (415).
* Render: build every piece with ``html("<td>{}</td>", value)`` (values escaped unless they are
  ``Markup``) and ``join(...)``; respond with ``console.page(request, title, body,
  current="/path")`` or ``console.fragment(body)``, which accept only ``Markup``. Never
  ``Markup(f"...")``. No inline ``<script>``, no ``style=`` or ``on*=`` attributes (the CSP
  refuses them): classes from ``static/console.css``, behaviour from ``static/console.js``.
* Live: give an element ``data-live="/some/fragment"`` and ``console.js`` replaces its content
  with that URL's fragment whenever the read models move (``GET /live``, server-sent events);
  fragment requests carry ``X-Sagafleet-Fragment: 1``. Add
  ``<span class="live-status"></span>`` to show whether the page is live.
* Errors: raise the ``SagaError`` you have (``NotPermitted`` 403, ``SagaNotFound`` 404,
  ``ConcurrencyError``/conflict 409, invalid input 400); the app renders it as a page.
* Static files go in ``sagafleet/console/static/`` (shipped as package data), served at
  ``/static/<name>``.
"""

from __future__ import annotations

from sagafleet.console.core import Console
from sagafleet.console.gate import Form, form_of, viewer_of
from sagafleet.console.layout import NavLink
from sagafleet.console.markup import Markup, csrf_field, html, join, pretty_json, url_part
from sagafleet.console.sessions import SessionPolicy, Viewer

__all__ = [
    "Console",
    "Form",
    "Markup",
    "NavLink",
    "SessionPolicy",
    "Viewer",
    "csrf_field",
    "form_of",
    "html",
    "join",
    "pretty_json",
    "url_part",
    "viewer_of",
]
