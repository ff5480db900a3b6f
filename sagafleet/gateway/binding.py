"""Who a tool call acts as: the principal proven by a token, never a name the caller types.

Tenant and actor of every call come from a :class:`~saga_core.access.roles.Principal` that the
fleet's principal directory proved from an API token:

* over stdio the server runs as the principal of the token it was started with
  (:class:`StartedAs`); the token is proven again on every call, so a revoked token stops the
  server acting within :data:`AUTH_CACHE_TTL`;
* over HTTP every request carries its own ``Authorization: Bearer <token>``; the ASGI
  middleware (:mod:`sagafleet.gateway.http_auth`) proves it before the MCP app sees the
  request and leaves the principal in the request's scope, where :class:`RequestBearer`
  finds it.

:class:`TokenCache` remembers a proven token for :data:`AUTH_CACHE_TTL` so a busy agent does
not cost a database query per message; it keys by the token's SHA-256, never the token, and
caches no refusal (a token issued a moment ago works at once).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final, Protocol

from saga_core.access.roles import Principal, Unauthenticated
from sagafleet.security_log import PRINCIPAL_SCOPE_KEY

Authenticate = Callable[[str], Principal]
"""Proves a token: its principal, else :class:`Unauthenticated` (as ``Fleet.authenticate``)."""

AUTH_CACHE_TTL: Final = timedelta(seconds=5)
"""How long a proven token is believed without asking the directory again: the longest a
revoked (or rotated) token may still act through a running gateway. Short, because
revocation is what an operator reaches for when a token has leaked."""

AUTH_CACHE_TOKENS: Final = 1024
"""Distinct tokens remembered at once; past it the cache starts afresh (a flood of valid
tokens costs queries, never memory)."""

TENANT_HEADER: Final = "x-sagafleet-tenant"
ACTOR_HEADER: Final = "x-sagafleet-actor"
CHOOSING_HEADERS: Final = (TENANT_HEADER, ACTOR_HEADER)
"""Headers that once chose tenant and actor; a request carrying one is refused, so a caller
never believes it acts for a tenant or under a name its token does not hold."""
CHOOSING_ARGUMENTS: Final = ("tenant", "actor")
"""Tool arguments refused for the same reason: no tool takes them, and a caller that sends
one is told so rather than having it silently ignored."""


class TokenCache:
    """Proves tokens through ``authenticate`` and believes a proof for ``ttl``.

    Safe to share between threads (the HTTP server proves tokens from worker threads).
    ``clock`` returns seconds (monotonic); tests pass their own.
    """

    def __init__(
        self, authenticate: Authenticate, *, ttl: timedelta = AUTH_CACHE_TTL,
        capacity: int = AUTH_CACHE_TOKENS, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._authenticate = authenticate
        self._ttl = ttl.total_seconds()
        self._capacity = capacity
        self._clock = clock
        self._proven: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def authenticate(self, token: str) -> Principal:
        """The token's principal, from the cache while fresh, else from the directory."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        now = self._clock()
        with self._lock:
            held = self._proven.get(digest)
        if held is not None and now < held[0]:
            return held[1]
        principal = self._authenticate(token)  # raises Unauthenticated: nothing is cached
        with self._lock:
            if len(self._proven) >= self._capacity:
                self._proven.clear()
            self._proven[digest] = (now + self._ttl, principal)
        return principal


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, else :class:`Unauthenticated`."""
    if authorization is None or not authorization.strip():
        raise Unauthenticated("the request carries no token: send Authorization: Bearer <token>")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header is not 'Bearer <token>'")
    return token.strip()


def choosing_headers(headers: Mapping[str, str]) -> list[str]:
    """The tenant- or actor-choosing headers present in ``headers`` (lower case)."""
    present = {name.lower() for name in headers}
    return [name for name in CHOOSING_HEADERS if name in present]


def choosing_arguments(arguments: Mapping[str, Any]) -> list[str]:
    """The tenant- or actor-choosing arguments of a tool call (named as the caller spelt
    them, any case)."""
    return sorted(name for name in arguments
                  if isinstance(name, str) and name.strip().lower() in CHOOSING_ARGUMENTS)


class Caller(Protocol):
    """Finds the principal a tool call acts as, given the transport's request (None on stdio)."""

    def principal(self, request: Any | None) -> Principal:
        """The proven principal of this call, or :class:`Unauthenticated`."""
        ...


class StartedAs:
    """stdio: every call acts as the principal of the token the server was started with."""

    def __init__(self, tokens: TokenCache, token: str) -> None:
        self._tokens = tokens
        self._token = token

    def principal(self, request: Any | None) -> Principal:
        """The start token's principal, proven again (through the cache) on every call."""
        return self._tokens.authenticate(self._token)


class RequestBearer:
    """HTTP: every call acts as the principal the middleware proved for its own request."""

    def principal(self, request: Any | None) -> Principal:
        """The principal left in the request's scope; none there is :class:`Unauthenticated`
        (the app was served without the middleware: fail closed)."""
        scope = getattr(request, "scope", None)
        found = scope.get(PRINCIPAL_SCOPE_KEY) if isinstance(scope, Mapping) else None
        if not isinstance(found, Principal):
            raise Unauthenticated("this request was not authenticated by the gateway")
        return found


class NoCaller:
    """A server whose tools are only listed (``sagafleet tools export``): every call refused."""

    def principal(self, request: Any | None) -> Principal:
        """Always :class:`Unauthenticated`: this server was built to describe its tools."""
        raise Unauthenticated("this server only describes its tools; it acts for nobody")
