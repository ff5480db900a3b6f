"""Sign-in with a principal's API token, and sign-out.

``GET /sign-in`` shows the form with a double-submit token (the same random value in a
cookie and in a hidden field: a page on another site can make a browser post, but cannot read
or set this site's cookie). ``POST /sign-in`` checks it, proves the token through the session
store, and sets the session cookie: ``HttpOnly``, ``SameSite=Strict``, ``Path=/``, ``Secure``
when the request came over https (TLS served by uvicorn, or a proxy's ``X-Forwarded-Proto``
when ``--forwarded-allow-ips`` trusts it), and no ``Max-Age``: it ends with the browser, and
the server ends it earlier by its idle and absolute expiry. ``POST /sign-out`` (a form with
the session's CSRF token) deletes the session and the cookie.

Failed sign-ins slow later ones of the same client address or token prefix
(:mod:`sagafleet.console.throttle`): past the free failures an attempt waits before its token
is checked, and one more than the few allowed to wait at once is refused (429,
``Retry-After``). Every refusal, and every slowed attempt, is a line of the security log
(:mod:`sagafleet.security_log`: ``csrf_refused``, ``signin_refused``, ``signin_throttled``,
``signin_slowed``), with the client's address, never the token.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import parse_qsl, quote

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from saga_core.access.roles import Unauthenticated
from sagafleet.console.core import Console
from sagafleet.console.gate import FORM_BYTES, SESSION_COOKIE, SIGNIN_COOKIE
from sagafleet.console.layout import sign_in_frame
from sagafleet.console.markup import Markup, html
from sagafleet.console.throttle import ThrottleKeys, ThrottleVerdict, throttle_keys
from sagafleet.security_log import client_address, note_refusal

__all__ = ["routes", "safe_next"]


def safe_next(target: str) -> str:
    """Where to go after signing in: a path of this site only (never ``//host`` or a URL)."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def _form(csrf: str, next_path: str, problem: str = "", sso: str | None = None) -> Markup:
    """The token form; with ``sso`` (the provider's name) a single sign-on link above it."""
    notice = html('<p class="notice error" role="alert">{}</p>', problem) if problem \
        else Markup("")
    single = html('<p><a class="button sso" href="/sign-in/oidc?next={}">Sign in with {}</a>'
                  '</p><p class="hint or">or with an API token:</p>',
                  quote(next_path, safe="/"), sso) if sso else Markup("")
    return html(
        '<section class="sign-in"><h1>Sign in</h1>{}{}'
        '<form method="post" action="/sign-in">'
        '<input type="hidden" name="csrf" value="{}">'
        '<input type="hidden" name="next" value="{}">'
        '<label for="token">API token</label>'
        '<input id="token" name="token" type="password" autocomplete="off" required '
        'placeholder="sft_…">'
        '<button type="submit">Sign in</button></form>'
        '<p class="hint">An admin issues tokens with <code>sagafleet principals add</code>; '
        '<code>sagafleet demo --keep-servers</code> prints its approver\'s.</p></section>',
        notice, single, csrf, next_path)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _with_signin_cookie(request: Request, response: Response, csrf: str) -> Response:
    response.set_cookie(SIGNIN_COOKIE, csrf, httponly=True, samesite="strict",
                        secure=_secure(request), path="/sign-in")
    return response


def routes(console: Console) -> list[BaseRoute]:
    """The sign-in and sign-out routes."""

    def show(request: Request) -> Response:
        csrf = secrets.token_urlsafe(32)
        next_path = safe_next(request.query_params.get("next", "/"))
        form = _form(csrf, next_path, sso=_sso_name(console))
        return _with_signin_cookie(request, sign_in_frame("Sign in", form), csrf)

    async def sign_in(request: Request) -> Response:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > FORM_BYTES:
                return sign_in_frame("Sign in", html("<p>The form is too large.</p>"),
                                     status=413)
        try:
            form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True,
                                  max_num_fields=20))
        except ValueError:
            return sign_in_frame("Sign in", html("<p>The form has too many fields.</p>"),
                                 status=400)
        expected = request.cookies.get(SIGNIN_COOKIE, "")
        given = form.get("csrf", "")
        next_path = safe_next(form.get("next", "/"))
        if not expected or not hmac.compare_digest(expected.encode(), given.encode()):
            note_refusal(request.scope, "csrf_refused",
                         "the sign-in form's CSRF token is missing or wrong")
            return _refused(request, console, next_path, "The sign-in form expired or came "
                            "from another site: sign in again.", 403)
        token = form.get("token", "").strip()
        keys = throttle_keys(client_address(request.scope), token)
        verdict = console.throttle.judge(
            keys, await anyio.to_thread.run_sync(console.throttle.failures.counted, keys))
        if verdict.refused:
            note_refusal(request.scope, "signin_throttled", _throttled(verdict))
            response = _refused(request, console, next_path, "Too many failed sign-ins from "
                                "this address or with this token: try again in "
                                f"{verdict.retry_after_s} s.", 429)
            response.headers["retry-after"] = str(verdict.retry_after_s)
            return response
        if verdict.delay_s > 0:
            with console.throttle.held(keys):
                await anyio.sleep(verdict.delay_s)
        try:
            opened = await _open(console, token)
        except Unauthenticated as exc:
            await anyio.to_thread.run_sync(console.throttle.failures.record, keys)
            note_refusal(request.scope, "signin_refused", str(exc),
                         delay_s=verdict.delay_s or None)
            return _refused(request, console, next_path, str(exc), 401)
        await _forgive(console, keys, verdict)
        if verdict.delay_s > 0:  # signed in, but only after a wait: worth knowing who waited
            note_refusal(request.scope, "signin_slowed", _throttled(verdict),
                         delay_s=verdict.delay_s)
        previous = request.cookies.get(SESSION_COOKIE)
        if previous:  # signing in again (maybe as someone else) ends the session before
            await anyio.to_thread.run_sync(console.sessions.close, previous)
        response = RedirectResponse(next_path, status_code=303)
        response.set_cookie(SESSION_COOKIE, opened, httponly=True, samesite="strict",
                            secure=_secure(request), path="/")
        response.delete_cookie(SIGNIN_COOKIE, path="/sign-in")
        return response

    def sign_out(request: Request) -> Response:
        console.sessions.close(request.cookies.get(SESSION_COOKIE, ""))
        response = RedirectResponse("/sign-in", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                               secure=_secure(request))
        return response

    return [
        Route("/sign-in", show, methods=["GET"]),
        Route("/sign-in", sign_in, methods=["POST"]),
        Route("/sign-out", sign_out, methods=["POST"]),
    ]


def _sso_name(console: Console) -> str | None:
    """The single sign-on provider's name for the sign-in page (None: not configured)."""
    return console.sso.settings.provider_name if console.sso is not None else None


def _refused(request: Request, console: Console, next_path: str, problem: str,
             status: int) -> Response:
    """The sign-in form again, saying why, with a fresh double-submit token."""
    fresh = secrets.token_urlsafe(32)
    page = sign_in_frame("Sign in", _form(fresh, next_path, problem, _sso_name(console)),
                         status=status)
    return _with_signin_cookie(request, page, fresh)


def _throttled(verdict: ThrottleVerdict) -> str:
    return (f"{verdict.failures} failed sign-ins of this address or token prefix in the "
            "window")


async def _forgive(console: Console, keys: ThrottleKeys, verdict: ThrottleVerdict) -> None:
    """After a success: the token prefix's failures are the person's own typos."""
    if verdict.failures:
        await anyio.to_thread.run_sync(console.throttle.failures.forgive, keys)


async def _open(console: Console, token: str) -> str:
    if not token:
        raise Unauthenticated("paste the API token to sign in")
    opened = await anyio.to_thread.run_sync(console.sessions.open, token)
    return opened.session_id
