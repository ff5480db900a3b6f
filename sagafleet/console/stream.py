"""``GET /live``: the server-sent event stream that tells a page to refresh its fragments.

Each announcement of the :class:`~sagafleet.console.live.LiveHub` is sent as ``event: moved``
with the announcement's number (no data of the log: the page fetches its own tenant's
fragments). A comment line (``: heartbeat``) goes out every ``heartbeat_s`` of the hub
(:data:`~sagafleet.console.live.HEARTBEAT_S`) so proxies keep
the connection and a closed tab is noticed; at each heartbeat the session is checked again,
and the stream ends once it is signed out, expired or its principal revoked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from sagafleet.console.core import Console
from sagafleet.console.gate import SESSION_COOKIE, viewer_of

__all__ = ["routes"]

RETRY_MS: Final = 3000
"""How long a browser waits before reconnecting a dropped stream."""


def routes(console: Console) -> list[BaseRoute]:
    """The event stream route."""

    async def live(request: Request) -> Response:
        viewer_of(request)  # the gate signed the request in
        session_id = request.cookies.get(SESSION_COOKIE, "")
        console.live.check_room()  # a full hub is refused (503) before the stream starts

        async def events() -> AsyncIterator[str]:
            async with console.live.subscription() as queue:
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
