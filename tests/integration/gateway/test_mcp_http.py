"""An agent over MCP streamable HTTP, with tenant and actor taken from trusted headers."""

from __future__ import annotations

import anyio
from gateway_support import TRIP_INPUT, call, free_port, wait_listening
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from saga_core.events import SagaStarted


def test_http_binds_each_session_to_its_headers_tenant(fleet, processes):
    # given an HTTP MCP server that trusts the X-Sagafleet-* headers (behind a proxy)
    port = free_port()
    server = processes.start("mcp", "--http", f"127.0.0.1:{port}", "--trust-headers")
    wait_listening(port, server)
    url = f"http://127.0.0.1:{port}/mcp"

    async def session_as(tenant: str, actor: str, work):  # type: ignore[no-untyped-def]
        headers = {"X-Sagafleet-Tenant": tenant, "X-Sagafleet-Actor": actor}
        async with create_mcp_http_client(headers=headers) as http, \
                streamable_http_client(url, http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)

    async def start(session: ClientSession) -> dict:
        names = {t.name for t in (await session.list_tools()).tools}
        assert "start_saga" in names and "approve" not in names
        args = {"definition": "trip", "input": TRIP_INPUT, "idempotency_key": "http-1",
                "reason": "booked over HTTP"}
        failed, first = await call(session, "start_saga", **args)
        assert not failed, first
        failed, again = await call(session, "start_saga", **args)
        assert not failed and again["saga_id"] == first["saga_id"] and not again["created"]
        return first

    def peek(saga_id: str):  # type: ignore[no-untyped-def]
        async def work(session: ClientSession) -> tuple[bool, dict]:
            return await call(session, "saga_status", saga_id=saga_id)
        return work

    async def scenario() -> tuple[dict, tuple[bool, dict], tuple[bool, dict]]:
        # when tenant acme's agent starts a trip (and retries)
        started = await session_as("acme", "http-bot", start)
        # and tenant beta's agent, then acme's, ask for it
        beta = await session_as("beta", "other-bot", peek(started["saga_id"]))
        acme = await session_as("acme", "http-bot", peek(started["saga_id"]))
        return started, beta, acme

    started, (beta_failed, beta), (acme_failed, acme) = anyio.run(scenario)
    # then beta is refused as if the saga did not exist, and acme sees it
    assert beta_failed and beta["error"] == "SagaNotFound"
    assert not acme_failed and acme["saga_id"] == started["saga_id"]
    # and the log binds the saga to the header's tenant and actor
    first = fleet.repo.load(started["saga_id"]).events[0]
    assert isinstance(first, SagaStarted)
    assert (first.tenant, first.actor, first.reason) == ("acme", "http-bot", "booked over HTTP")
