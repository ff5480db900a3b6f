"""``GET /live``: the server-sent event stream that tells a page to refresh its fragments.

Each announcement of the :class:`~sagafleet.console.live.LiveHub` is sent as ``event: moved``
with the announcement's number (no data of the log: the page fetches its own tenant's
fragments). A comment line (``: heartbeat``) goes out every ``heartbeat_s`` of the hub
(:data:`~sagafleet.console.live.HEARTBEAT_S`) so proxies keep
the connection and a closed tab is noticed; at each heartbeat the session is checked again,
and the stream ends once it is signed out, expired or its principal revoked.

A stream over a bound of the hub is refused before it starts, with ``Retry-After``: 429 when
the session, principal or tenant holds as many as it may, 503 when the process does. Either
is a line of the security log (``throttled``). The page's script (``static/console.js``) then
reconnects with exponential backoff and jitter, refreshing its fragments at each attempt, so
a refused page still moves, only more slowly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from sagafleet.console.core import Console
from sagafleet.console.gate import SESSION_COOKIE, viewer_of
from sagafleet.console.live import StreamOwner, StreamQuotaExceeded, TooManySubscribers
from sagafleet.security_log import note_refusal

__all__ = ["REFUSED_RETRY_S", "routes"]

RETRY_MS: Final = 3000
"""How long a browser waits before reconnecting a dropped stream (the page's script, which
backs off on its own, closes a failed stream before the browser would)."""
REFUSED_RETRY_S: Final = 30
"""The ``Retry-After`` of a refused stream (the script's backoff reaches it in a few tries)."""


def routes(console: Console) -> list[BaseRoute]:
    """The event stream route."""

    async def live(request: Request) -> Response:
        viewer = viewer_of(request)  # the gate signed the request in
        session_id = request.cookies.get(SESSION_COOKIE, "")
        owner = StreamOwner(viewer.session_digest, viewer.tenant, viewer.principal.name)
        try:  # refused before the stream starts (answered with a status, not an event)
            console.live.check_room(owner)
        except (StreamQuotaExceeded, TooManySubscribers) as exc:
            status = 429 if isinstance(exc, StreamQuotaExceeded) else 503
            note_refusal(request.scope, "throttled", f"live stream: {exc}")
            return PlainTextResponse(str(exc), status_code=status,
                                     headers={"retry-after": str(REFUSED_RETRY_S)})

        async def events() -> AsyncIterator[str]:
            async with console.live.subscription(owner) as queue:
                yield f"retry: {RETRY_MS}\n: connected\n\n"
                while True:
                    try:
                        number = await asyncio.wait_for(queue.get(), console.live.heartbeat_s)
                    except TimeoutError:
                        still = await anyio.to_thread.run_sync(console.sessions.look,
                                                               session_id)
                        if still is None:
                            yield "event: signed-out\ndata: \n\n"
                            return
                        yield ": heartbeat\n\n"
                        continue
                    yield f"event: moved\ndata: {number}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store",
                                          "x-accel-buffering": "no"})

    return [Route("/live", live, methods=["GET"])]
