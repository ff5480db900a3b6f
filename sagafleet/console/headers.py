"""The security headers every console response carries, whatever produced it.

A strict Content-Security-Policy: scripts, styles, images, fetches and the event stream come
from this origin only, nothing inline (no ``<script>`` blocks, no ``style=``, no ``on*=``
handlers), no framing, forms post only here. Even a value that escaped escaping could then
run nothing. Plus ``nosniff``, no referrer to other sites, and ``no-store`` caching for pages
(a signed-in page must not outlive sign-out in a shared browser's cache).

Over https (TLS served by uvicorn, or a trusted proxy's ``X-Forwarded-Proto: https``) every
response also carries ``Strict-Transport-Security`` (:data:`HSTS`): a browser that once
reached the console over https never again sends its session cookie over plain http to that
host, even when a link or a typed address says http. Without ``includeSubDomains``: the
console does not speak for the other hosts of its domain.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["CONTENT_SECURITY_POLICY", "HSTS", "SecurityHeaders", "security_headers"]

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
_ALWAYS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii")),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with
    # every form post, and the gate's same-origin check then refuses the console's own forms.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


HSTS: Final = "max-age=31536000"
"""A year: what browsers' preload rules ask for, and long enough to outlast a visit's gap."""


def security_headers(*, static: bool, https: bool = False) -> list[tuple[bytes, bytes]]:
    """The headers a response carries (a static file's may be cached; a page's may not;
    over https, HSTS too)."""
    headers = [*_ALWAYS] if static else [*_ALWAYS, (b"cache-control", b"no-store")]
    if https:
        headers.append((b"strict-transport-security", HSTS.encode("ascii")))
    return headers


class SecurityHeaders:
    """ASGI middleware adding :func:`security_headers` to every HTTP response.

    Starlette answers an unhandled exception from its outermost middleware, outside this
    one: the console's handler for it adds the same headers itself (see ``create_app``).
    """

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Call the app; add the headers to its response start."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith("/static/")

        ours = security_headers(static=static, https=scope.get("scheme") == "https")
        replaced = {name for name, _ in ours}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *((k, v) for k, v in message.get("headers", []) if k.lower() not in replaced),
                    *ours]
            await send(message)

        await self.app(scope, receive, send_with_headers)
