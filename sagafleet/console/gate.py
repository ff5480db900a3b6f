"""The console's door: every request is signed in, and every form proves its CSRF token,
before a page sees it (secure by default: a page cannot forget either).

:class:`Gate` is ASGI middleware. For each HTTP request it:

1. lets through the public paths (the sign-in page and the static files) untouched;
2. resumes the session named by the session cookie (:class:`~sagafleet.console.sessions.
   SessionStore`, which re-checks the principal); none: a page is redirected (303) to the
   sign-in page, anything else (a fragment, the event stream, a form post) is answered 401;
3. for every method but GET/HEAD: refuses (403) a request whose ``Origin`` is another site,
   reads the body (at most :data:`FORM_BYTES`, ``application/x-www-form-urlencoded`` only),
   and refuses (403) it unless its ``csrf`` field equals the session's token; the parsed form
   is left for the page (:func:`form_of`) and the body is replayed to the app;
4. leaves the viewer in the request's scope (:func:`viewer_of`).

What a page requests by itself (a live refresh carrying ``X-Sagafleet-Fragment``, the event
stream) is checked the same way but is not the person's activity: it does not extend the
session's idle timeout.

The sign-in form itself is protected by a double-submit cookie (:data:`SIGNIN_COOKIE`),
checked by the sign-in page (there is no session yet to tie a token to).

Each refusal says why for the security log (:func:`sagafleet.security_log.note_refusal`): a
401 (``unauthenticated``), a post from another site or with a wrong CSRF token
(``csrf_refused``); the signed-in principal is left in the scope for its line too. A page
opened without a session is redirected, not refused: it is no line of the log.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qsl, quote

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from saga_core.errors import ErrorKind, SagaError
from sagafleet.console.sessions import SessionStore, Viewer
from sagafleet.security_log import PRINCIPAL_SCOPE_KEY, note_refusal

__all__ = ["FORM_BYTES", "Form", "Gate", "SESSION_COOKIE", "SIGNIN_COOKIE", "form_of",
           "viewer_of"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE: Final = "sagafleet_session"
SIGNIN_COOKIE: Final = "sagafleet_signin"
FORM_BYTES: Final = 64 * 1024
"""The largest form body read (a reason and a few fields; evidence JSON included)."""
FORM_FIELDS: Final = 100
"""The most fields a form may have."""
PUBLIC_PREFIXES: Final = ("/static/",)
PUBLIC_PATHS: Final = frozenset({"/sign-in", "/favicon.ico", "/healthz",  # /healthz: liveness
                                  "/sign-in/oidc", "/sign-in/oidc/callback"})  # single sign-on
VIEWER_KEY: Final = "sagafleet.viewer"
FORM_KEY: Final = "sagafleet.form"
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
FRAGMENT_HEADER: Final = "x-sagafleet-fragment"
"""Sent by console.js with every live refresh of a fragment."""
LIVE_PATH: Final = "/live"


class Form(Mapping[str, str]):
    """A posted form's fields (a repeated field: its last value); read-only."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = tuple(pairs)
        self._fields = dict(pairs)

    def __getitem__(self, key: str) -> str:
        return self._fields[key]

    def __iter__(self) -> Any:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def text(self, name: str, default: str = "") -> str:
        """The field's value stripped of surrounding space, or ``default``."""
        return self._fields.get(name, default).strip()

    def all_of(self, name: str) -> list[str]:
        """Every value of a repeated field (checkboxes of one name), in order."""
        return [value for key, value in self._pairs if key == name]


def viewer_of(request: Request) -> Viewer:
    """The signed-in viewer of a request that passed the gate."""
    viewer = request.scope.get(VIEWER_KEY)
    if not isinstance(viewer, Viewer):  # a public path: pages never are
        raise RuntimeError("viewer_of() on a request the gate did not sign in")
    return viewer


def form_of(request: Request) -> Form:
    """The posted form of a request that passed the gate (its CSRF token already checked)."""
    form = request.scope.get(FORM_KEY)
    if not isinstance(form, Form):
        raise RuntimeError("form_of() on a request that posted no form")
    return form


def is_automatic(request: Request) -> bool:
    """Whether the page made this request by itself (a live fragment refresh, the event
    stream), not the person: it does not count as activity for the idle timeout."""
    return request.url.path == LIVE_PATH or FRAGMENT_HEADER in request.headers


def is_public(path: str) -> bool:
    """Whether ``path`` is served without a session."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def same_origin(headers: Headers) -> bool:
    """Whether the request's ``Origin`` (when sent) names this server's host and port.

    The scheme is not compared: behind a TLS proxy the browser's origin is https while the
    console may hear http; what matters is that no other site posted the form (a proxy must
    pass the original ``Host``). ``Origin: null`` (an opaque origin) is another site.
    """
    origin = headers.get("origin")
    if origin is None:  # not sent (same-origin navigation in some browsers): the token decides
        return True
    _, _, netloc = origin.partition("://")
    return bool(netloc) and netloc.lower() == headers.get("host", "").lower()


class Gate:
    """ASGI middleware: sign-in and CSRF checks in front of every page."""

    def __init__(self, app: App, sessions: SessionStore) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Sign the request in and check its form, then call the app."""
        if scope["type"] != "http" or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        session_id = request.cookies.get(SESSION_COOKIE, "")
        try:
            check = self.sessions.look if is_automatic(request) else self.sessions.resume
            viewer = await anyio.to_thread.run_sync(check, session_id) if session_id else None
        except SagaError as exc:
            status = 503 if exc.kind is ErrorKind.UNAVAILABLE else 500
            await _plain(status, f"the console cannot check sessions: {exc}")(scope, receive,
                                                                                send)
            return
        if viewer is None:
            await _not_signed_in(request)(scope, receive, send)
            return
        scope[VIEWER_KEY] = viewer
        scope[PRINCIPAL_SCOPE_KEY] = viewer.principal
        if scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        if not same_origin(request.headers):
            note_refusal(scope, "csrf_refused", "the form was posted from another site")
            await _plain(403, "refused: the form was posted from another site")(
                scope, receive, send)
            return
        body, refusal = await _read_form_body(request.headers, receive)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        try:
            pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True,
                              max_num_fields=FORM_FIELDS)
        except ValueError:
            await _plain(400, f"refused: a form has at most {FORM_FIELDS} fields")(
                scope, receive, send)
            return
        form = Form(pairs)
        if not hmac.compare_digest(form.get("csrf", "").encode(), viewer.csrf.encode()):
            note_refusal(scope, "csrf_refused", "the form's CSRF token is missing or wrong")
            await _plain(403, "refused: the form's CSRF token is missing or wrong (reload the "
                         "page and try again)")(scope, receive, send)
            return
        scope[FORM_KEY] = form
        await self.app(scope, _replay(body), send)


async def _read_form_body(headers: Headers, receive: Receive) -> tuple[bytes, Response | None]:
    """The request body when it is a form of at most FORM_BYTES, else the refusal."""
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return b"", _plain(415, "refused: post a form (application/x-www-form-urlencoded)")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", _plain(400, "the request ended before its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > FORM_BYTES:
            return b"", _plain(413, f"refused: the form is larger than {FORM_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None


def _replay(body: bytes) -> Receive:
    """A receive callable that hands the app the body already read, once."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


def _not_signed_in(request: Request) -> Response:
    wants_page = (request.method in SAFE_METHODS
                  and "text/html" in request.headers.get("accept", "")
                  and FRAGMENT_HEADER not in request.headers)
    if wants_page:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/sign-in?next={quote(target, safe='')}", status_code=303)
    note_refusal(request.scope, "unauthenticated",
                 "no session, or it expired or was signed out" if
                 request.cookies.get(SESSION_COOKIE) else "no session cookie")
    return _plain(401, "not signed in (or the session expired): sign in at /sign-in")


def _plain(status: int, text: str) -> Response:
    return PlainTextResponse(text, status_code=status)
