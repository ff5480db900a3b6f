"""Abuse at the gateway's edge, on a real ``sagafleet mcp --http`` process: a caller that tries
to choose its tenant or actor with a tool argument, arguments the tools cannot take, a
definition name holding a NUL; each refusal is a line of the server's security log (its
stderr), and no line and no answer carries a token or the value refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from gateway_support import TRIP_INPUT, call, free_port, principal_token, recorded, wait_listening
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_mcp_http import INITIALIZE, START_CALL, _post

from saga_core.access.roles import PrincipalKind

pytestmark = pytest.mark.integration

SECRET_VALUE = "hunter2-do-not-echo"


@pytest.fixture
def served(processes, server_env, tmp_path) -> tuple[str, Path]:  # type: ignore[no-untyped-def]
    """A real ``sagafleet mcp --http`` with the access log on; its URL and its output file."""
    processes.env = server_env | {"SAGAFLEET_ACCESS_LOG": "true"}
    port = free_port()
    wait_listening(port, processes.start("mcp", "--http", f"127.0.0.1:{port}"))
    return f"http://127.0.0.1:{port}/mcp", tmp_path / "mcp-0.log"


def _json_lines(output: Path, logger: str) -> list[dict[str, Any]]:
    """The JSON objects the server logged on ``logger`` (its text log format: the message
    after ``<logger>: ``)."""
    marker = f" {logger}: "
    return [json.loads(line.split(marker, 1)[1]) for line in output.read_text().splitlines()
            if marker in line]


def _as(url: str, token: str, work):  # type: ignore[no-untyped-def]
    async def session() -> Any:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                streamable_http_client(url, http_client=http) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            return await work(mcp)
    return anyio.run(session)


def test_a_tool_argument_that_chooses_tenant_or_actor_is_refused_and_logged(
        fleet, database, served):
    url, output = served
    token = principal_token(fleet, "acme", "arg-bot")
    before = recorded(database)

    async def work(mcp: ClientSession) -> list[tuple[bool, dict[str, Any]]]:
        start = {"definition": "trip", "input": TRIP_INPUT, "idempotency_key": "arg-1",
                 "reason": "try to act for beta"}
        return [await call(mcp, "start_saga", **start, tenant="beta"),
                await call(mcp, "start_saga", **start, Actor="mallory"),
                await call(mcp, "saga_status", saga_id="x", tenant="beta")]

    # when acme's agent calls tools with a tenant or an actor argument
    answers = _as(url, token, work)
    # then each call is refused as the headers are, saying who the token acts as
    for failed, document in answers:
        assert failed and document["error"] == "BindingRefused", document
        assert document["kind"] == "invalid_input"
        assert "'arg-bot' of tenant 'acme'" in document["message"]
    # and nothing was started
    assert recorded(database) == before
    assert fleet.client(tenant="acme").find("arg-1") is None
    # and each refusal is a security-log line naming the principal, the tool and the client
    refused = [line for line in _json_lines(output, "sagafleet.security")
               if line["event"] == "binding_refused"]
    assert [(line["tool"], line["tenant"], line["principal"], line["client"])
            for line in refused] == [("start_saga", "acme", "arg-bot", "127.0.0.1"),
                                     ("start_saga", "acme", "arg-bot", "127.0.0.1"),
                                     ("saga_status", "acme", "arg-bot", "127.0.0.1")]
    assert token not in output.read_text()


def test_malformed_arguments_are_named_without_their_values(fleet, served):
    url, output = served
    token = principal_token(fleet, "acme", "typo-bot")

    async def work(mcp: ClientSession) -> list[tuple[bool, dict[str, Any]]]:
        return [
            await call(mcp, "saga_wait", saga_id="x", timeout_seconds=SECRET_VALUE),
            await call(mcp, "start_saga", definition=["trip", SECRET_VALUE],
                       input=TRIP_INPUT, idempotency_key="k", reason="r"),
        ]

    # when a tool is called with arguments its signature cannot take
    answers = _as(url, token, work)
    # then the answer names each field and rule, and never the value it refused
    (wait_failed, wait), (start_failed, start) = answers
    assert wait_failed and wait["error"] == "ArgumentsRejected"
    assert [p["where"] for p in wait["problems"]] == ["timeout_seconds"]
    assert start_failed and [p["where"] for p in start["problems"]] == ["definition"]
    for document in (wait, start):
        assert SECRET_VALUE not in json.dumps(document)
    assert SECRET_VALUE not in output.read_text()


def test_a_definition_name_with_a_nul_is_invalid_input(fleet, database, served):
    url, _ = served
    token = principal_token(fleet, "acme", "nul-bot")
    before = recorded(database)

    async def work(mcp: ClientSession) -> tuple[bool, dict[str, Any]]:
        return await call(mcp, "start_saga", definition="trip\x00x", input=TRIP_INPUT,
                          idempotency_key="nul-1", reason="a name no definition has")

    # when an agent starts a definition whose name holds a NUL
    failed, document = _as(url, token, work)
    # then it is invalid input naming the rule (not a database failure), and nothing started
    assert failed and document["kind"] == "invalid_input", document
    assert "NUL" in document["message"] and "trip" not in document["message"]
    assert recorded(database) == before


def test_refused_and_forbidden_requests_are_logged_without_the_token(fleet, served):
    url, output = served
    auditor = principal_token(fleet, "acme", "ada", "auditor", kind=PrincipalKind.PERSON)
    wrong = "sft_" + "W" * 43
    # when a request comes with an unknown token, another with a header choosing the tenant,
    # and the auditor tries to start a saga
    assert _post(url, START_CALL, authorization=f"Bearer {wrong}").status_code == 401
    assert _post(url, INITIALIZE, authorization=f"Bearer {auditor}",
                 **{"x-sagafleet-tenant": "beta"}).status_code == 400

    async def work(mcp: ClientSession) -> tuple[bool, dict[str, Any]]:
        return await call(mcp, "start_saga", definition="trip", input=TRIP_INPUT,
                          idempotency_key="by-ada", reason="audit")

    failed, document = _as(url, auditor, work)
    assert failed and document["kind"] == "forbidden"
    # then the security log has one line for each, with the client and (once proven) who
    events = {line["event"]: line for line in _json_lines(output, "sagafleet.security")}
    assert events["unauthenticated"]["status"] == 401
    assert events["unauthenticated"]["path"] == "/mcp"
    assert events["unauthenticated"]["client"] == "127.0.0.1"
    assert "principal" not in events["unauthenticated"]
    refused = events["binding_refused"]
    assert (refused["status"], refused["principal"], refused["tenant"]) == (400, "ada", "acme")
    assert "x-sagafleet-tenant" in refused["reason"]
    forbidden = events["forbidden"]
    assert (forbidden["tool"], forbidden["principal"]) == ("start_saga", "ada")
    # and the access log has a line per request, the path without its query, no token
    access = _json_lines(output, "sagafleet.access")
    assert {line["path"] for line in access} == {"/mcp"}
    assert {401, 400, 200} <= {line["status"] for line in access}
    assert {line["principal"] for line in access if line["status"] == 200} == {"ada"}
    text = output.read_text()
    assert wrong not in text and auditor not in text


def test_plain_http_other_machines_can_reach_is_warned_about_at_start(processes, tmp_path):
    # when the gateway listens on every interface, and another on the loopback only
    port, local = free_port(), free_port()
    wait_listening(port, processes.start("mcp", "--http", f"0.0.0.0:{port}"))
    wait_listening(local, processes.start("mcp", "--http", f"127.0.0.1:{local}"))
    # then the first says at start that bearer tokens would cross the network in clear
    everywhere = (tmp_path / "mcp-0.log").read_text()
    assert f"WARNING: serving plain http on 0.0.0.0:{port}" in everywhere
    assert "bearer tokens" in everywhere
    # and the loopback one says nothing of the kind
    assert "plain http" not in (tmp_path / "mcp-1.log").read_text()
