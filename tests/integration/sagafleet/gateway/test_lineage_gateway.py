"""Lineage through the MCP gateway (issue 19 part 1): start_saga's ``lineage`` argument,
over a real ``sagafleet mcp --http`` process and through the exported functions."""

from __future__ import annotations

import anyio
import pytest
from gateway_support import TRIP_INPUT, call, free_port, principal_token, wait_listening
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from saga_core.access.roles import Principal
from saga_core.engine.events import SagaStarted
from sagafleet.gateway import FunctionRouter, GatewayService

TRACE = "5b8aa5a2d2c872e8321cf37308d69df2"
ASKED = {"agent_request_id": "mcp-req-9", "model_name": "claude-haiku",
         "model_version": "4.5", "prompt_version": "policy-2026-11", "trace_id": TRACE}


@pytest.fixture
def http_server(processes) -> str:  # type: ignore[no-untyped-def]
    port = free_port()
    wait_listening(port, processes.start("mcp", "--http", f"127.0.0.1:{port}"))
    return f"http://127.0.0.1:{port}/mcp"


def test_start_saga_over_mcp_http_records_the_agents_lineage(fleet, http_server):
    token = principal_token(fleet, "acme", "http-bot")

    async def scenario() -> tuple[dict, dict, dict]:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                streamable_http_client(http_server, http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            schema = tools["start_saga"].input_schema["properties"]["lineage"]
            base = {"definition": "trip", "input": TRIP_INPUT, "reason": "with lineage"}
            failed, started = await call(session, "start_saga", idempotency_key="mcp-l1",
                                         lineage=ASKED, **base)
            assert not failed, started
            failed, refused = await call(
                session, "start_saga", idempotency_key="mcp-l2", **base,
                lineage={"trace_id": "ABC", "model_name": "x" * 201, "extra": 1})
            assert failed
            return schema, started, refused

    schema, started, refused = anyio.run(scenario)
    assert "agent_request_id" in str(schema) and "trace_id" in str(schema)
    first = fleet.repo.load_history(started["saga_id"], tenant="acme").events[0]
    assert isinstance(first, SagaStarted) and first.lineage is not None
    assert first.lineage.model_dump() == ASKED and first.actor == "http-bot"
    assert {r.stream_id for r in fleet.store.events_of_trace("acme", TRACE)} == {
        f"saga-{started['saga_id']}"}
    assert refused["error"] == "ArgumentsRejected"
    assert {p["where"] for p in refused["problems"]} == {
        "lineage.extra", "lineage.trace_id", "lineage.model_name"}
    assert fleet.client(tenant="acme").find("mcp-l2") is None


def test_the_exported_start_function_takes_a_lineage(fleet):
    router = FunctionRouter(GatewayService(fleet))
    who = Principal.in_process_agent("acme", "fc-bot")
    started = router.call(who, "start_trip", {"input": TRIP_INPUT, "idempotency_key": "fc-l",
                                              "reason": "r", "lineage": ASKED})
    assert started["created"], started
    first = fleet.repo.load_history(started["saga_id"], tenant="acme").events[0]
    assert isinstance(first, SagaStarted) and first.lineage is not None
    assert first.lineage.prompt_version == "policy-2026-11"
    bad = router.call(who, "start_trip", {"input": TRIP_INPUT, "idempotency_key": "fc-m",
                                          "reason": "r", "lineage": "req-1"})
    assert bad["problems"] == [{"where": "lineage", "rule": "wrong_type",
                                "message": "expected object, got str"}]
