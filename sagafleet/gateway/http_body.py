"""The HTTP transport's body cap: ``sagafleet mcp --http`` never reads more than it accepts.

:class:`BodyLimit` wraps the MCP Starlette app. A request whose Content-Length is over
``mcp_body_bytes`` is answered ``413`` before a byte of its body is read; one without a
length (chunked) is read only until it passes the limit, then answered ``413``. Either
answer is a JSON-RPC error naming the limit and the size seen. A body within the limit is
held once and replayed to the app, so memory per request stays at most the limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from saga_core.limits import MCP_BODY_BYTES, Limit, LimitExceeded

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """ASGI middleware refusing request bodies over ``limit`` (default ``mcp_body_bytes``)."""

    def __init__(self, app: App, limit: Limit = MCP_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the declared length, then read at most the limit before calling the app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit.value:
            await _refuse(send, LimitExceeded(self.limit, "request body", declared))
            return
        held: list[Message] = []
        size = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break  # the client went away: the app sees it as it would have
            size += len(message.get("body", b""))
            if size > self.limit.value:
                await _refuse(send, LimitExceeded(self.limit, "request body", size,
                                                  at_least=True))
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isascii() and text.isdigit() else None
    return None


async def _refuse(send: Send, error: LimitExceeded) -> None:
    """Answer 413 with a JSON-RPC error (no request id: the body was never read)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": -32600, "message": str(error),
                                 "data": {"limit": error.limit.name,
                                          "limit_value": error.limit.value,
                                          "seen": error.seen, "at_least": error.at_least}}})
    payload = body.encode("utf-8")
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode("ascii")),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload})
