"""The HTTP door: no valid bearer token, no request reaches the MCP app (ASGI, no server)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from application.principals.memory import MemoryPrincipals
from saga_core.errors import ErrorKind, SagaError
from sagafleet.gateway import BearerAuth, TokenCache
from sagafleet.gateway.binding import PRINCIPAL_SCOPE_KEY


class RecordingApp:
    """The MCP app stand-in: records the scopes it was called with and answers 200."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        self.scopes.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _request(app: BearerAuth, headers: dict[str, str]) -> tuple[int, dict[str, str], dict]:
    """(status, headers, JSON body) of one POST through ``app``."""
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "POST", "path": "/mcp",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(app, scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    answer_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], answer_headers, json.loads(body)


@pytest.fixture
def door():
    directory = MemoryPrincipals()
    inner = RecordingApp()
    return directory, inner, BearerAuth(inner, TokenCache(directory.authenticate))


def test_a_request_without_a_token_is_401_with_a_bearer_challenge_and_a_json_problem(door):
    _, inner, app = door
    # when a request carries no Authorization header
    status, headers, problem = _request(app, {"content-type": "application/json"})
    # then it is refused before the app sees it, with a challenge and a typed problem
    assert status == 401 and inner.scopes == []
    assert headers["www-authenticate"] == 'Bearer realm="sagafleet"'
    assert headers["content-type"] == "application/problem+json"
    assert problem["status"] == 401 and problem["title"] == "Unauthorized"
    assert problem["kind"] == "unauthenticated" and problem["error"] == "Unauthenticated"
    assert "Authorization: Bearer" in problem["detail"] and problem["hint"]


@pytest.mark.parametrize("authorization", ["Bearer sft_" + "A" * 43, "Bearer nonsense",
                                           "Basic dXNlcjpwYXNz"])
def test_an_unknown_or_malformed_token_is_401_invalid_token(door, authorization):
    _, inner, app = door
    status, headers, problem = _request(app, {"Authorization": authorization})
    assert status == 401 and inner.scopes == []
    assert headers["www-authenticate"] == 'Bearer realm="sagafleet", error="invalid_token"'
    assert problem["kind"] == "unauthenticated"
    assert authorization.split()[-1] not in json.dumps(problem)  # never echoed back


def test_a_revoked_token_is_401(door):
    directory, inner, app = door
    issued = directory.add("acme", "bot", "agent", ["agent"])
    directory.revoke("acme", "bot", "leaked")
    status, _, problem = _request(app, {"Authorization": f"Bearer {issued.token}"})
    assert status == 401 and inner.scopes == [] and problem["kind"] == "unauthenticated"


def test_a_valid_token_reaches_the_app_as_its_principal(door):
    directory, inner, app = door
    issued = directory.add("acme", "bot", "agent", ["agent"])
    status, _, _ = _request(app, {"Authorization": f"Bearer {issued.token}"})
    assert status == 200
    (scope,) = inner.scopes
    assert scope[PRINCIPAL_SCOPE_KEY] == issued.principal
    # and the MCP SDK sees the principal as the session's owner (tenant/name), not the token
    assert scope["user"].access_token.client_id == "acme/bot"
    assert issued.token not in repr(scope["user"].access_token)


@pytest.mark.parametrize("header", ["X-Sagafleet-Tenant", "x-sagafleet-actor"])
def test_a_request_that_tries_to_choose_tenant_or_actor_is_refused(door, header):
    # given a valid token of acme
    directory, inner, app = door
    issued = directory.add("acme", "bot", "agent", ["agent"])
    # when the request also names a tenant or actor in a header
    status, _, problem = _request(app, {"Authorization": f"Bearer {issued.token}",
                                        header: "beta"})
    # then it is refused, saying that the token decides, and the app never sees it
    assert status == 400 and inner.scopes == []
    assert problem["error"] == "BindingRefused" and problem["kind"] == "invalid_input"
    assert header.lower() in problem["detail"] and "'acme'" in problem["detail"]


def test_a_directory_that_cannot_answer_lets_nobody_in():
    # given a directory whose database is down
    class Down(SagaError):
        kind = ErrorKind.UNAVAILABLE

    def authenticate(token: str):  # type: ignore[no-untyped-def]
        raise Down("the database is unavailable")

    inner = RecordingApp()
    app = BearerAuth(inner, TokenCache(authenticate))
    # when a request with a token arrives, then it is 503 with a problem, never let through
    status, _, problem = _request(app, {"Authorization": "Bearer sft_" + "A" * 43})
    assert status == 503 and inner.scopes == [] and problem["kind"] == "unavailable"
