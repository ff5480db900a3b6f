"""Every tool call acts as the principal a token proves; nothing a caller types chooses it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from application.principals.memory import MemoryPrincipals
from saga_core.access.roles import Principal, PrincipalKind, Unauthenticated
from sagafleet.commands.mcp_cmd import MCP_EPILOG
from sagafleet.gateway import NoCaller, RequestBearer, StartedAs, TokenCache
from sagafleet.gateway.binding import (
    AUTH_CACHE_TTL,
    PRINCIPAL_SCOPE_KEY,
    bearer_token,
    choosing_headers,
)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingDirectory:
    """The memory directory, counting how often it is asked."""

    def __init__(self) -> None:
        self.directory = MemoryPrincipals()
        self.asked = 0

    def authenticate(self, token: str) -> Principal:
        self.asked += 1
        return self.directory.authenticate(token)


def test_a_token_proves_its_principal_and_the_proof_is_believed_only_briefly():
    # given an agent of acme with a token, behind a cache
    directory, clock = CountingDirectory(), Clock()
    issued = directory.directory.add("acme", "planner-bot", PrincipalKind.AGENT, ["agent"])
    tokens = TokenCache(directory.authenticate, clock=clock)
    # when the token is proven twice in quick succession
    first = tokens.authenticate(issued.token)
    again = tokens.authenticate(issued.token)
    # then it is the principal, with its tenant, name and roles, and the directory was asked once
    assert first == again == Principal("acme", "planner-bot", PrincipalKind.AGENT,
                                       frozenset({"agent"}))
    assert directory.asked == 1
    # when the principal is revoked, the cached proof holds until the cache time is over
    directory.directory.revoke("acme", "planner-bot", "leaked")
    clock.now += AUTH_CACHE_TTL.total_seconds() - 0.001
    assert tokens.authenticate(issued.token).name == "planner-bot"
    # then, once it is over, the revoked token is refused
    clock.now += 0.001
    with pytest.raises(Unauthenticated):
        tokens.authenticate(issued.token)


def test_a_refused_token_is_never_cached():
    # given a cache over a directory that knows no token
    directory = CountingDirectory()
    tokens = TokenCache(directory.authenticate, clock=Clock())
    # when an unknown token is tried twice, then both are refused, each by the directory
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            tokens.authenticate("sft_" + "x" * 43)
    assert directory.asked == 2


def test_a_full_cache_starts_afresh_and_keeps_no_token_in_clear():
    # given a cache of two tokens
    directory = CountingDirectory()
    issued = [directory.directory.add("acme", f"bot-{i}", "agent", ["agent"]) for i in range(3)]
    tokens = TokenCache(directory.authenticate, capacity=2, clock=Clock(),
                        ttl=timedelta(hours=1))
    # when three tokens are proven, then each is still its own principal
    assert [tokens.authenticate(i.token).name for i in issued] == ["bot-0", "bot-1", "bot-2"]
    # and the cache started afresh for the third: the first is asked for again, the third not
    tokens.authenticate(issued[0].token)
    tokens.authenticate(issued[2].token)
    assert directory.asked == 4
    # and what the cache holds is keyed by digests, never the tokens
    assert all(i.token not in repr(vars(tokens)) for i in issued)


def test_stdio_acts_as_the_start_token_and_stops_once_it_is_revoked():
    # given a stdio server started with an agent's token
    directory, clock = MemoryPrincipals(), Clock()
    issued = directory.add("acme", "planner-bot", "agent", ["agent"])
    caller = StartedAs(TokenCache(directory.authenticate, clock=clock), issued.token)
    # when a call arrives (no transport request), then it acts as the token's principal
    assert caller.principal(None).name == "planner-bot"
    # when the token is revoked and the cache time passes, then calls are refused
    directory.revoke("acme", "planner-bot", "done")
    clock.now += AUTH_CACHE_TTL.total_seconds()
    with pytest.raises(Unauthenticated):
        caller.principal(None)


def test_http_calls_act_as_the_principal_the_middleware_proved_and_fail_closed_without():
    principal = Principal("acme", "http-bot", PrincipalKind.AGENT, frozenset({"agent"}))
    # given a request the middleware proved, then the call acts as its principal
    proved = SimpleNamespace(scope={PRINCIPAL_SCOPE_KEY: principal})
    assert RequestBearer().principal(proved) == principal
    # and a request nobody proved (or no request at all) is refused, never a default
    for unproved in (SimpleNamespace(scope={}), None, SimpleNamespace(scope={
            PRINCIPAL_SCOPE_KEY: "acme"})):
        with pytest.raises(Unauthenticated):
            RequestBearer().principal(unproved)


def test_a_server_built_only_to_list_its_tools_acts_for_nobody():
    with pytest.raises(Unauthenticated):
        NoCaller().principal(None)


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer sft_abc", "sft_abc"),
    ("bearer   sft_abc  ", "sft_abc"),
])
def test_the_bearer_token_is_read_from_the_authorization_header(header, token):
    assert bearer_token(header) == token


@pytest.mark.parametrize("header", [None, "", "   ", "Bearer", "Bearer   ", "Basic dXNlcjpw",
                                    "sft_abc"])
def test_a_missing_or_malformed_authorization_header_is_unauthenticated(header):
    with pytest.raises(Unauthenticated, match="token|Bearer"):
        bearer_token(header)


def test_headers_that_would_choose_tenant_or_actor_are_found_in_any_case():
    assert choosing_headers({"X-Sagafleet-Tenant": "beta", "X-SAGAFLEET-ACTOR": "x",
                             "accept": "*/*"}) == ["x-sagafleet-tenant", "x-sagafleet-actor"]
    assert choosing_headers({"authorization": "Bearer t"}) == []


def test_the_help_and_the_readme_state_how_fast_a_revocation_takes_effect():
    stated = f"within {AUTH_CACHE_TTL.total_seconds():g} seconds"
    assert stated in " ".join(MCP_EPILOG.split())
    page = (Path(__file__).parents[4] / "docs" / "agents.md").read_text(encoding="utf-8")
    assert stated in " ".join(page.split())
