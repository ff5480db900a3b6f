"""The HTTP transport's door: ``sagafleet mcp --http`` serves only requests that prove a token.

:class:`BearerAuth` wraps the MCP Starlette app (outside the body cap, so an unproven caller
never gets a byte of its body read). For each HTTP request it:

1. takes the token of ``Authorization: Bearer <token>``; none, a malformed header, or a
   token the principal directory does not know or has revoked is answered ``401`` with
   ``WWW-Authenticate: Bearer`` and a JSON problem (``application/problem+json``) naming
   what is wrong; the app never sees the request;
2. refuses (``400``, ``BindingRefused``) a request that carries ``X-Sagafleet-Tenant`` or
   ``X-Sagafleet-Actor``: tenant and actor come from the token, and a caller that believes
   it chooses them is told so rather than silently acting for another tenant or name;
3. leaves the proven principal in the request's scope (``sagafleet.principal``, read by
   :class:`~sagafleet.gateway.binding.RequestBearer`) and as the MCP SDK's authenticated
   user, so an MCP session opened with one principal's token is not found by another's.

Each refusal says why for the security log (:mod:`sagafleet.security_log`, whose
:class:`~sagafleet.security_log.RequestLog` wraps this middleware): the line names the
client, the path and, once the token is proven, the principal; never the token.

A directory that cannot answer (PostgreSQL down) lets nobody in: ``503`` (``500`` for any
other failure), with the same JSON problem.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio.to_thread
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from saga_core.access.roles import Principal, Unauthenticated
from saga_core.errors import ErrorKind, SagaError
from sagafleet.gateway.binding import TokenCache, bearer_token, choosing_headers
from sagafleet.gateway.errors import BindingRefused, tool_error
from sagafleet.security_log import PRINCIPAL_SCOPE_KEY, note_refusal

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

REALM = "sagafleet"


class BearerAuth:
    """ASGI middleware: every HTTP request proves a token before ``app`` sees it."""

    def __init__(self, app: App, tokens: TokenCache) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Prove the token, refuse choosing headers, then call the app as the principal."""
        if scope["type"] != "http":  # lifespan: no caller, nothing to prove
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            token = bearer_token(headers.get("authorization"))
            # The directory asks PostgreSQL: off the event loop, so one slow query never
            # stalls every other connection.
            principal = await anyio.to_thread.run_sync(self.tokens.authenticate, token)
        except Unauthenticated as exc:
            note_refusal(scope, "unauthenticated", str(exc))
            await _problem(send, 401, exc, challenge=_challenge(headers))
            return
        except SagaError as exc:  # the directory could not answer: nobody is let in
            await _problem(send, 503 if exc.kind is ErrorKind.UNAVAILABLE else 500, exc)
            return
        scope[PRINCIPAL_SCOPE_KEY] = principal
        refused = choosing_headers(headers)
        if refused:
            note_refusal(scope, "binding_refused", f"the request carries {', '.join(refused)}")
            await _problem(send, 400, BindingRefused(
                f"the request carries {', '.join(refused)}: tenant and actor come from the "
                f"bearer token (this one acts as {principal.name!r} of tenant "
                f"{principal.tenant!r}); send the request without them"))
            return
        scope["user"] = AuthenticatedUser(_access_token(principal, token))
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (a repeated header: its last value)."""
    return {name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())}


def _challenge(headers: dict[str, str]) -> str:
    """The ``WWW-Authenticate`` value (RFC 6750: a token that was sent is ``invalid_token``)."""
    if headers.get("authorization", "").strip():
        return f'Bearer realm="{REALM}", error="invalid_token"'
    return f'Bearer realm="{REALM}"'


def _access_token(principal: Principal, token: str) -> AccessToken:
    """The principal as the SDK's access token: its sessions belong to tenant and name."""
    who = f"{principal.tenant}/{principal.name}"
    return AccessToken(token=hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest(),
                       client_id=who, subject=who, scopes=sorted(principal.roles))


async def _problem(send: Send, status: int, error: SagaError, *, challenge: str = "") -> None:
    """Answer ``status`` with a JSON problem (RFC 9457) carrying the tool-error fields."""
    title = {400: "Bad Request", 401: "Unauthorized", 500: "Internal Server Error",
             503: "Service Unavailable"}[status]
    body = json.dumps({"type": "about:blank", "title": title, "status": status,
                       "detail": str(error), **tool_error(error)})
    payload = body.encode("utf-8")
    headers = [(b"content-type", b"application/problem+json"),
               (b"content-length", str(len(payload)).encode("ascii")),
               (b"connection", b"close")]
    if challenge:
        headers.append((b"www-authenticate", challenge.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
