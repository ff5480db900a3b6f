"""Single sign-on against a real OpenID provider (npm oidc-provider on loopback): the whole
authorization code flow with PKCE, driven through the provider's own login and consent pages,
into a console over a real fleet (PostgreSQL and Redis); and each way it must refuse."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from console_support import POLICY, csrf_of
from oidc_provider import (
    CONSOLE_URL,
    OidcProviderProcess,
    ProviderBrowser,
    free_port,
    oidc_env,
)
from principal_support import token_for
from starlette.testclient import TestClient

from application.orchestrator import utc_now
from saga_core.access.roles import PrincipalKind
from sagafleet.console.app import create_app
from sagafleet.console.core import Console
from sagafleet.console.gate import SESSION_COOKIE
from sagafleet.console.service import console_for
from sagafleet.console.sessions import SessionStore
from sagafleet.console.sso.provider import OidcProvider
from sagafleet.console.sso.signin import SsoSignIn
from sagafleet.security_log import SECURITY_LOGGER
from sagafleet.settings import Settings
from sagafleet.sso_settings import OidcSettings, oidc_settings
from workers.fleet import Fleet

pytestmark = pytest.mark.integration


def settings_for(issuer: str, **more: str) -> OidcSettings:
    configured = oidc_settings(Settings.from_env(oidc_env(issuer, **more)))
    assert configured is not None
    return configured


class Clock:
    """The console's clock for single sign-on, moved by the test (never the wall clock's
    passing: a shift added to it)."""

    def __init__(self) -> None:
        self.shift = timedelta(0)
        self.monotonic = 1000.0

    def now(self) -> datetime:
        return utc_now() + self.shift


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sso_console(fleet: Fleet, provider: OidcProviderProcess, clock: Clock) -> Console:
    """The console of the test's fleet with single sign-on through the test provider."""
    console = console_for(fleet, POLICY)
    settings = settings_for(provider.issuer)
    console.sso = SsoSignIn(settings, fleet.store, console.sessions,
                            provider=OidcProvider(settings, monotonic=lambda: clock.monotonic),
                            clock=clock.now)
    return console


@pytest.fixture
def web(sso_console: Console) -> Iterator[TestClient]:
    """The person's browser at the console."""
    with TestClient(create_app(sso_console), base_url=CONSOLE_URL,
                    follow_redirects=False) as client:
        yield client


@pytest.fixture
def security_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[dict[str, Any]]]:
    caplog.set_level(logging.WARNING, logger=SECURITY_LOGGER)
    return lambda: [json.loads(r.getMessage()) for r in caplog.records
                    if r.name == SECURITY_LOGGER]


def start(web: TestClient, next_path: str = "/queue") -> str:
    """Click "Sign in with …" on the console: the provider's authorization URL."""
    page = web.get(f"/sign-in?next={next_path}")
    assert "Sign in with Test IdP" in unescape(page.text)
    answer = web.get(f"/sign-in/oidc?next={next_path}")
    assert answer.status_code == 303, answer.text
    return answer.headers["location"]


def callback(web: TestClient, url: str) -> Any:
    return web.get(url.removeprefix(CONSOLE_URL))


def sso_sign_in(web: TestClient, login: str, next_path: str = "/queue") -> Any:
    """The whole flow for ``login``; the console's answer to the callback."""
    return callback(web, ProviderBrowser().sign_in(start(web, next_path), login))


def signed_out(web: TestClient) -> bool:
    """Whether the console sends this browser to the sign-in page."""
    answer = web.get("/queue", headers={"accept": "text/html"})
    return answer.status_code == 303 and answer.headers["location"].startswith("/sign-in")


def rows(fleet: Fleet, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with fleet.store.connection() as conn:
        return list(conn.execute(sql, args).fetchall())


def test_a_person_in_a_mapped_group_signs_in_and_becomes_a_person_principal(
        fleet: Fleet, web: TestClient, provider: OidcProviderProcess) -> None:
    authorization = start(web)
    query = parse_qs(urlsplit(authorization).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["state"][0] and query["nonce"][0] and "code_verifier" not in query

    at_provider = ProviderBrowser()
    answer = callback(web, at_provider.sign_in(authorization, "ada"))
    assert at_provider.interactions == 2  # the provider's login form, then its consent
    assert answer.status_code == 200, answer.text
    assert "Signed in as ada (tenant default) through Test IdP" in unescape(answer.text)
    assert '<meta http-equiv="refresh" content="0;url=/queue">' in unescape(answer.text)
    assert "samesite=strict" in answer.headers["set-cookie"].lower()

    queue = web.get("/queue")
    assert queue.status_code == 200 and "ada · tenant default" in unescape(queue.text)
    record = fleet.principals.get("default", "ada")
    assert record.kind is PrincipalKind.PERSON
    assert record.roles == {"operator", "approver"}
    assert record.token_issued_at is None  # signs in through the provider: no API token
    bound = rows(fleet, "SELECT issuer, subject, tenant, name FROM fleet.principal_identities")
    assert bound == [(provider.issuer, "ada", "default", "ada")]
    recorded = rows(fleet, "SELECT outcome, groups, roles FROM fleet.identity_sign_ins")
    assert recorded == [("created", ["ops-approvers", "staff"], ["approver", "operator"])]


def test_a_second_sign_in_finds_the_principal_by_subject_and_follows_group_changes(
        fleet: Fleet, web: TestClient, provider: OidcProviderProcess) -> None:
    assert sso_sign_in(web, "ada").status_code == 200
    web.cookies.clear()
    provider.accounts["ada"]["claims"]["groups"] = ["auditors"]
    provider.accounts["ada"]["claims"]["preferred_username"] = "ada.lovelace"  # renamed
    provider.write_accounts()

    assert sso_sign_in(web, "ada").status_code == 200
    assert "ada · tenant default" in web.get("/queue").text  # the same principal
    assert fleet.principals.get("default", "ada").roles == {"auditor"}
    outcomes = rows(fleet, "SELECT outcome, roles FROM fleet.identity_sign_ins ORDER BY id")
    assert outcomes == [("created", ["approver", "operator"]), ("roles_changed", ["auditor"])]


def test_an_administrators_person_principal_of_the_same_name_is_linked(
        fleet: Fleet, web: TestClient) -> None:
    token_for(fleet, "grace", ["auditor"])
    assert sso_sign_in(web, "grace").status_code == 200
    assert rows(fleet, "SELECT outcome FROM fleet.identity_sign_ins") == [("linked",)]
    assert "grace · tenant default" in web.get("/queue").text


def test_a_person_in_no_mapped_group_is_refused_with_a_page_and_a_log_line(
        fleet: Fleet, web: TestClient,
        security_log: Callable[[], list[dict[str, Any]]]) -> None:
    answer = sso_sign_in(web, "eve")
    assert answer.status_code == 403
    assert "eve is in no group that grants a console role" in unescape(answer.text)
    assert "Sign in with an API token instead" in unescape(answer.text)
    assert SESSION_COOKIE not in web.cookies
    assert rows(fleet, "SELECT count(*) FROM fleet.principals WHERE name = 'eve'") == [(0,)]
    line = security_log()[-1]
    assert line["event"] == "sso_refused" and line["reason"].startswith("no_mapped_group:")
    assert line["status"] == 403 and line["path"] == "/sign-in/oidc/callback"


def test_an_agent_never_comes_in_by_single_sign_on(fleet: Fleet, web: TestClient) -> None:
    token_for(fleet, "bot-default", ["agent"], kind=PrincipalKind.AGENT)
    answer = sso_sign_in(web, "mallory")  # whose name claim is the agent's name
    assert answer.status_code == 403
    assert "is an agent; agents never sign in by single sign-on" in unescape(answer.text)
    assert signed_out(web)  # not signed in


def test_a_revoked_person_cannot_sign_in_again(fleet: Fleet, web: TestClient) -> None:
    assert sso_sign_in(web, "ada").status_code == 200
    fleet.principals.revoke("default", "ada", "left the company")
    assert signed_out(web)  # the open session ended at once
    web.cookies.clear()
    answer = sso_sign_in(web, "ada")
    assert answer.status_code == 403 and "is revoked" in unescape(answer.text)


def test_a_callback_with_another_browsers_state_is_refused(
        web: TestClient, security_log: Callable[[], list[dict[str, Any]]]) -> None:
    url = ProviderBrowser().sign_in(start(web), "ada")
    web.cookies.clear()  # another browser: it holds another sign-in's state
    web.cookies.set("sagafleet_oidc_state", "someone-elses-state", path="/sign-in/oidc")
    answer = callback(web, url)
    assert answer.status_code == 403 and "did not start in this browser" in unescape(answer.text)
    assert security_log()[-1]["reason"].startswith("bad_state:")


def test_a_replayed_callback_is_refused_and_a_replayed_code_is_refused_by_the_provider(
        web: TestClient, security_log: Callable[[], list[dict[str, Any]]]) -> None:
    url = ProviderBrowser().sign_in(start(web), "ada")
    state_cookie = web.cookies.get("sagafleet_oidc_state")
    assert callback(web, url).status_code == 200

    # The same callback again, state cookie and all: the state worked once.
    web.cookies.clear()
    web.cookies.set("sagafleet_oidc_state", state_cookie, path="/sign-in/oidc")
    again = callback(web, url)
    assert again.status_code == 403 and "a callback works once" in unescape(again.text)

    # The used code under a fresh sign-in's state: the provider refuses it.
    fresh_state = parse_qs(urlsplit(start(web)).query)["state"][0]
    code = parse_qs(urlsplit(url).query)["code"][0]
    replayed = web.get(f"/sign-in/oidc/callback?code={code}&state={fresh_state}")
    assert replayed.status_code == 401 and "refused this sign-in's code" in unescape(replayed.text)
    assert [line["reason"].split(":")[0] for line in security_log()[-2:]] == [
        "bad_state", "code_refused"]


def test_an_id_token_for_another_nonce_is_refused(fleet: Fleet, web: TestClient) -> None:
    url = ProviderBrowser().sign_in(start(web), "ada")
    with fleet.store.connection() as conn:  # the sign-in now waits for another nonce
        conn.execute("UPDATE fleet.oidc_sign_ins SET nonce = 'another-sign-ins-nonce'")
    answer = callback(web, url)
    assert answer.status_code == 401 and "nonce is not this sign-in's" in unescape(answer.text)


def test_an_expired_id_token_is_refused(web: TestClient, clock: Clock) -> None:
    clock.shift = timedelta(hours=3)  # the provider's ID tokens live one hour
    answer = sso_sign_in(web, "ada")
    assert answer.status_code == 401 and "the ID token expired" in unescape(answer.text)


def test_a_rotated_signing_key_is_fetched_once_and_a_flood_of_unknown_keys_is_not(
        web: TestClient, provider: OidcProviderProcess, clock: Clock,
        security_log: Callable[[], list[dict[str, Any]]]) -> None:
    assert sso_sign_in(web, "ada").status_code == 200  # the console keeps key-1's set
    provider.restart("key-2")
    web.cookies.clear()

    # Read less than 30 s ago: the console does not read the key set again.
    clock.monotonic += 5
    refused = sso_sign_in(web, "ada")
    assert refused.status_code == 401 and "key id 'key-2'" in unescape(refused.text)
    assert security_log()[-1]["reason"].startswith("unknown_key:")

    clock.monotonic += 60  # later: the unknown key id makes it read the set again
    web.cookies.clear()
    assert sso_sign_in(web, "ada").status_code == 200


def test_a_provider_that_is_down_gives_a_clear_page(
        fleet: Fleet, security_log: Callable[[], list[dict[str, Any]]]) -> None:
    console = console_for(fleet, POLICY, sso=settings_for(f"http://127.0.0.1:{free_port()}"))
    with TestClient(create_app(console), base_url=CONSOLE_URL, follow_redirects=False) as web:
        answer = web.get("/sign-in/oidc?next=/queue")
    assert answer.status_code == 502
    assert "discovery document cannot be reached" in unescape(answer.text)
    assert security_log()[-1]["reason"].startswith("provider_unavailable:")


def test_a_person_who_cancels_at_the_provider_is_told_so(web: TestClient) -> None:
    url = ProviderBrowser().sign_in(start(web), "ada", consent=False)
    answer = callback(web, url)
    assert answer.status_code == 403
    assert "the provider did not sign you in (access_denied)" in unescape(answer.text)


def test_a_single_sign_on_session_is_a_session_like_a_tokens(
        fleet: Fleet, web: TestClient) -> None:
    assert sso_sign_in(web, "ada").status_code == 200
    page = web.get("/queue")
    refused = web.post("/sign-out", data={"csrf": "forged"})  # CSRF as for every form
    assert refused.status_code == 403
    out = web.post("/sign-out", data={"csrf": csrf_of(page.text)})
    assert out.status_code == 303 and out.headers["location"] == "/sign-in"
    assert signed_out(web)
    assert rows(fleet, "SELECT count(*) FROM fleet.console_sessions") == [(0,)]


def test_a_single_sign_on_session_ends_after_the_idle_timeout_as_a_tokens_does(
        fleet: Fleet, provider: OidcProviderProcess, clock: Clock) -> None:
    console = console_for(fleet, POLICY)
    console.sessions = SessionStore(fleet.store, fleet.principals, POLICY, clock.now)
    settings = settings_for(provider.issuer)
    console.sso = SsoSignIn(settings, fleet.store, console.sessions, clock=clock.now)
    with TestClient(create_app(console), base_url=CONSOLE_URL, follow_redirects=False) as web:
        assert sso_sign_in(web, "ada").status_code == 200
        assert not signed_out(web)
        clock.shift += POLICY.idle + timedelta(seconds=1)
        assert signed_out(web)


def test_a_console_with_the_wrong_client_secret_says_the_provider_refused_it(
        fleet: Fleet, provider: OidcProviderProcess, clock: Clock) -> None:
    wrong = settings_for(provider.issuer, SAGAFLEET_OIDC_CLIENT_SECRET="not-the-secret")
    console = console_for(fleet, POLICY)
    console.sso = SsoSignIn(wrong, fleet.store, console.sessions, clock=clock.now)
    with TestClient(create_app(console), base_url=CONSOLE_URL, follow_redirects=False) as web:
        answer = sso_sign_in(web, "ada")
    assert answer.status_code == 502
    assert "refused the exchange (HTTP 401, invalid_client)" in unescape(answer.text)


def test_without_single_sign_on_the_sign_in_page_has_only_the_token_form(
        fleet: Fleet) -> None:
    with TestClient(create_app(console_for(fleet, POLICY)), base_url=CONSOLE_URL,
                    follow_redirects=False) as plain:
        assert "Sign in with" not in plain.get("/sign-in").text
        assert plain.get("/sign-in/oidc").status_code == 404
