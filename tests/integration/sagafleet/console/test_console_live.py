"""Live updates: the event stream, fed by the store's notifications, tells a page when the
read models moved; the queue fragment then holds the new entry. Served by a real uvicorn on a
local port (Starlette's test client buffers whole responses; a stream never ends)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from console_support import CSRF, start_waiting_capture
from principal_support import token_for
from read_model_support import project_all

from sagafleet.console.app import create_app
from sagafleet.console.core import Console
from sagafleet.console.live import LiveHub, LiveLimits, StreamOwner, TooManySubscribers

try:  # the HTTP client the mcp dependency brings (starlette's test client uses it too)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - an environment with the original package
    import httpx  # type: ignore[no-redef]

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(console: Console) -> Iterator[str]:
    """The console served by uvicorn in a thread; yields its base URL."""
    console.live = LiveHub(console.fleet.store, heartbeat_s=0.5)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(console), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # only ends a hung start
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the console never started"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def _signed_in(base: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30)
    form = client.get("/sign-in")
    csrf = CSRF.search(form.text)
    assert csrf
    answer = client.post("/sign-in", data={"csrf": csrf.group(1), "token": token})
    assert answer.status_code == 303, answer.text
    return client


def _next_event(lines: Iterator[str]) -> tuple[str, str]:
    """The next (event, data) of a stream, skipping comments (heartbeats)."""
    event = data = ""
    for line in lines:
        if line.startswith(":") or line.startswith("retry:"):
            continue
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif line == "" and event:
            return event, data
    raise AssertionError("the stream ended")


def test_a_new_queue_entry_is_announced_once_the_read_model_has_it(fleet, console, served):
    client = _signed_in(served, token_for(fleet, "olivia", ("approver",)))
    assert "Nothing waits" in client.get("/queue/fragment").text
    with client.stream("GET", "/live") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert next(lines).startswith("retry:")
        # when a saga starts and the projector applies it
        saga_id = start_waiting_capture(fleet)
        project_all(console.read)
        # then the stream says the read models moved, and the fragment holds the entry
        assert _next_event(lines)[0] == "moved"
    fragment = client.get("/queue/fragment", headers={"x-sagafleet-fragment": "1"}).text
    assert f'data-saga="{saga_id}"' in fragment and "<html" not in fragment
    client.close()


def test_the_stream_ends_once_its_session_is_signed_out(fleet, served):
    client = _signed_in(served, token_for(fleet, "olivia", ("operator",)))
    other = httpx.Client(base_url=served, timeout=30, cookies=client.cookies)
    with client.stream("GET", "/live") as stream:
        lines = stream.iter_lines()
        csrf = CSRF.search(other.get("/queue").text)
        assert csrf
        assert other.post("/sign-out", data={"csrf": csrf.group(1)}).status_code == 303
        assert _next_event(lines)[0] == "signed-out"
    client.close()
    other.close()


def test_the_hub_refuses_a_subscriber_beyond_its_bound(fleet) -> None:
    hub = LiveHub(fleet.store, limits=LiveLimits(per_process=1))
    owner, other = StreamOwner("s1", "acme", "ana"), StreamOwner("s2", "globex", "gus")

    async def scenario() -> Any:
        async with hub.subscription(owner):
            with pytest.raises(TooManySubscribers):
                async with hub.subscription(other):
                    pass
            assert hub.subscribers == 1
        return hub.subscribers

    assert asyncio.run(scenario()) == 0
