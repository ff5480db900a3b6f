"""The single sign-on routes: ``GET /sign-in/oidc`` and ``GET /sign-in/oidc/callback``.

``/sign-in/oidc`` starts a sign-in (:meth:`SsoSignIn.start`), keeps its state in the cookie
:data:`STATE_COOKIE` (``HttpOnly``, ``SameSite=Lax`` — the provider's redirect back is a
top-level navigation from another site, which a ``Strict`` cookie would miss — path
``/sign-in/oidc``, ten minutes) and redirects the browser to the provider.

``/sign-in/oidc/callback`` finishes it (:meth:`SsoSignIn.finish`) and sets the session cookie,
exactly as the token form does (``HttpOnly``, ``SameSite=Strict``, ``Secure`` over https). It
answers with a small page that moves on to where the person was going by a ``<meta>``
refresh, not with a redirect: the browser arrived from the provider's site, and a redirect
would carry that cross-site origin on, so the first page would go without the ``Strict``
session cookie and ask to sign in again.

Every refusal is a page saying why (with a way to try again and the token form) and a line
of the security log (``sso_refused``, ``code: reason``), never a traceback.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sagafleet.console.gate import SESSION_COOKIE
from sagafleet.console.layout import sign_in_frame
from sagafleet.console.markup import html
from sagafleet.console.sessions import SessionStore
from sagafleet.console.signin import safe_next
from sagafleet.console.sso.refusal import SsoRefused
from sagafleet.console.sso.signin import PENDING_FOR, SsoSignIn
from sagafleet.security_log import note_refusal

__all__ = ["START_PATH", "STATE_COOKIE", "routes"]

START_PATH: Final = "/sign-in/oidc"
CALLBACK_ROUTE: Final = "/sign-in/oidc/callback"
STATE_COOKIE: Final = "sagafleet_oidc_state"


def routes(sso: SsoSignIn, sessions: SessionStore) -> list[BaseRoute]:
    """The two routes of single sign-on through ``sso``."""

    async def start(request: Request) -> Response:
        next_path = safe_next(request.query_params.get("next", "/"))
        try:
            started = await anyio.to_thread.run_sync(sso.start, next_path)
        except SsoRefused as exc:
            return _refused(request, sso, exc)
        response = RedirectResponse(started.authorization_url, status_code=303)
        response.set_cookie(STATE_COOKIE, started.state, httponly=True, samesite="lax",
                            secure=_secure(request), path=START_PATH,
                            max_age=int(PENDING_FOR.total_seconds()))
        return response

    async def callback(request: Request) -> Response:
        query = request.query_params
        try:
            finished = await anyio.to_thread.run_sync(lambda: sso.finish(
                cookie_state=request.cookies.get(STATE_COOKIE, ""),
                state=query.get("state", ""), code=query.get("code", ""),
                error=query.get("error", "")))
        except SsoRefused as exc:
            response = _refused(request, sso, exc)
            response.delete_cookie(STATE_COOKIE, path=START_PATH)
            return response
        previous = request.cookies.get(SESSION_COOKIE)
        if previous:  # signing in again (maybe as someone else) ends the session before
            await anyio.to_thread.run_sync(sessions.close, previous)
        principal = finished.opened.viewer.principal
        next_path = safe_next(finished.next_path)
        response = sign_in_frame("Signed in", html(
            '<section class="sign-in"><h1>Signed in</h1><p class="notice ok" role="status">'
            'Signed in as {} (tenant {}) through {}.</p><p><a href="{}">Continue</a></p>'
            '</section>', principal.name, principal.tenant, sso.settings.provider_name,
            next_path), refresh_to=next_path)
        response.set_cookie(SESSION_COOKIE, finished.opened.session_id, httponly=True,
                            samesite="strict", secure=_secure(request), path="/")
        response.delete_cookie(STATE_COOKIE, path=START_PATH)
        return response

    return [Route(START_PATH, start, methods=["GET"]),
            Route(CALLBACK_ROUTE, callback, methods=["GET"])]


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _refused(request: Request, sso: SsoSignIn, exc: SsoRefused) -> Response:
    """The refusal page, and its line in the security log."""
    note_refusal(request.scope, "sso_refused", f"{exc.code}: {exc}")
    body = html(
        '<section class="sign-in"><h1>Single sign-on refused</h1>'
        '<p class="notice error" role="alert">{}</p>'
        '<p><a class="button sso" href="{}">Sign in with {} again</a></p>'
        '<p class="hint"><a href="/sign-in">Sign in with an API token instead</a></p>'
        '</section>', str(exc), START_PATH + "?next=" + quote("/", safe="/"),
        sso.settings.provider_name)
    return sign_in_frame("Single sign-on refused", body, status=exc.status)
