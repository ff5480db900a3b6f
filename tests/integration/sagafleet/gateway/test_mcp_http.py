"""An agent over MCP streamable HTTP: every request proves a bearer token, whose principal
decides tenant, actor and what the request may do."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from gateway_support import TRIP_INPUT, call, free_port, principal_token, recorded, wait_listening
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from saga_core.access.roles import PrincipalKind
from saga_core.engine.events import SagaStarted

MCP_HEADERS = {"accept": "application/json, text/event-stream",
               "content-type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "door-test", "version": "1"}}}
START_CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "start_saga", "arguments": {"definition": "trip", "input": TRIP_INPUT,
                                        "idempotency_key": "door", "reason": "try the door"}}}


@pytest.fixture
def http_server(processes) -> str:  # type: ignore[no-untyped-def]
    """A real ``sagafleet mcp --http`` process on a free port; its endpoint's URL."""
    port = free_port()
    wait_listening(port, processes.start("mcp", "--http", f"127.0.0.1:{port}"))
    return f"http://127.0.0.1:{port}/mcp"


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, headers by lower-case name, and body text."""

    status_code: int
    headers: dict[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def _post(url: str, body: dict[str, Any], **headers: str) -> Answer:
    """POST ``body`` as JSON to the MCP endpoint with the MCP headers and ``headers``."""
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        conn.request("POST", where.path, body=json.dumps(body).encode(),
                     headers=MCP_HEADERS | headers)
        response = conn.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()},
                      response.read().decode())
    finally:
        conn.close()


def test_http_refuses_every_request_without_a_valid_token_and_starts_nothing(
    fleet, database, http_server
):
    # given a revoked agent token, and nothing recorded yet
    revoked = principal_token(fleet, "acme", "old-bot")
    fleet.principals.revoke("acme", "old-bot", "leaked")
    before = recorded(database)
    # when a start_saga call (and an initialize) arrive with no token, a malformed header,
    # an unknown token and the revoked one
    for authorization, challenge in [
        (None, 'Bearer realm="sagafleet"'),
        ("Basic YWdlbnQ6cGFzcw==", 'Bearer realm="sagafleet", error="invalid_token"'),
        ("Bearer sft_" + "A" * 43, 'Bearer realm="sagafleet", error="invalid_token"'),
        (f"Bearer {revoked}", 'Bearer realm="sagafleet", error="invalid_token"'),
    ]:
        for body in (START_CALL, INITIALIZE):
            extra = {"authorization": authorization} if authorization else {}
            answer = _post(http_server, body, **extra)
            # then each is 401 with a Bearer challenge and a JSON problem
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"] == challenge
            assert answer.headers["content-type"] == "application/problem+json"
            problem = answer.json()
            assert problem["status"] == 401 and problem["kind"] == "unauthenticated"
            assert problem["detail"] and problem["hint"]
            assert revoked not in answer.text
    # and nothing was started, registered or deposited
    assert recorded(database) == before
    assert fleet.client(tenant="acme").find("door") is None


def test_http_refuses_headers_that_choose_tenant_or_actor_and_sessions_of_another_token(
    fleet, database, http_server
):
    # given valid agent tokens of acme and beta
    acme = {"authorization": f"Bearer {principal_token(fleet, 'acme', 'http-bot')}"}
    beta = {"authorization": f"Bearer {principal_token(fleet, 'beta', 'other-bot')}"}
    before = recorded(database)
    # when acme's token comes with a header asking for tenant beta, or for another actor
    for header in ({"x-sagafleet-tenant": "beta"}, {"X-Sagafleet-Actor": "mallory"}):
        answer = _post(http_server, START_CALL, **acme, **header)
        # then the request is refused as a whole: the token alone decides
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "BindingRefused"
    assert recorded(database) == before
    # when acme opens a session, and beta's token sends a message into it
    opened = _post(http_server, INITIALIZE, **acme)
    assert opened.status_code == 200, opened.text
    session = {"mcp-session-id": opened.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-06-18"}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    # then beta is answered as if the session did not exist, and acme can use it
    assert _post(http_server, initialized, **beta, **session).status_code == 404
    assert _post(http_server, initialized, **acme, **session).status_code == 202


def test_http_binds_each_request_to_its_tokens_principal(fleet, http_server):
    # given an agent of acme, an agent of beta and an auditor of acme, each with a token
    tokens = {
        "acme": principal_token(fleet, "acme", "http-bot"),
        "beta": principal_token(fleet, "beta", "other-bot"),
        "auditor": principal_token(fleet, "acme", "ada", "auditor", kind=PrincipalKind.PERSON),
    }

    async def session_as(who: str, work):  # type: ignore[no-untyped-def]
        headers = {"Authorization": f"Bearer {tokens[who]}"}
        async with create_mcp_http_client(headers=headers) as http, \
                streamable_http_client(http_server, http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)

    async def start(session: ClientSession) -> dict:
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == {"list_sagas", "start_saga", "put_secret", "propose_plan",
                         "saga_status", "saga_wait", "saga_audit", "cancel_saga"}
        args = {"definition": "trip", "input": TRIP_INPUT, "idempotency_key": "http-1",
                "reason": "booked over HTTP"}
        failed, first = await call(session, "start_saga", **args)
        assert not failed, first
        failed, again = await call(session, "start_saga", **args)
        assert not failed and again["saga_id"] == first["saga_id"] and not again["created"]
        return first

    def calls(*wanted: tuple[str, dict[str, Any]]):  # type: ignore[no-untyped-def]
        async def work(session: ClientSession) -> list[tuple[bool, dict]]:
            return [await call(session, tool, **arguments) for tool, arguments in wanted]
        return work

    async def scenario() -> tuple[dict, list, list, list]:
        # when acme's agent starts a trip (and retries)
        started = await session_as("acme", start)
        saga = {"saga_id": started["saga_id"]}
        # and beta's agent asks for it and tries to cancel it
        beta = await session_as("beta", calls(
            ("saga_status", saga), ("cancel_saga", saga | {"reason": "not mine"})))
        # and acme's auditor reads it, then tries to start and to cancel
        auditor = await session_as("auditor", calls(
            ("saga_status", saga),
            ("start_saga", {"definition": "trip", "input": TRIP_INPUT,
                            "idempotency_key": "by-auditor", "reason": "audit"}),
            ("cancel_saga", saga | {"reason": "audit"})))
        acme = await session_as("acme", calls(("saga_status", saga)))
        return started, beta, auditor, acme

    started, beta, auditor, acme = anyio.run(scenario)
    # then beta is refused as if the saga did not exist
    assert [(failed, doc["error"]) for failed, doc in beta] == [(True, "SagaNotFound")] * 2
    # and the auditor may read but gets FORBIDDEN for starting and cancelling
    (read_failed, read), *refused = auditor
    assert not read_failed and read["saga_id"] == started["saga_id"]
    for failed, doc in refused:
        assert failed and doc["error"] == "NotPermitted" and doc["kind"] == "forbidden"
        assert "'ada'" in doc["message"] and doc["hint"]
    assert fleet.client(tenant="acme").find("by-auditor") is None
    # and acme's agent still sees its saga, not cancelled
    (failed, status), = acme
    assert not failed and status["saga_id"] == started["saga_id"]
    assert status["status"] == "RUNNING"
    # and the log binds the saga to the token's tenant and principal's name
    first = fleet.repo.load_history(started["saga_id"]).events[0]
    assert isinstance(first, SagaStarted)
    assert (first.tenant, first.actor, first.reason) == ("acme", "http-bot", "booked over HTTP")
