"""Console sessions: sign-in and sign-out, the cookie's flags, expiry (idle and absolute), and
a principal revoked or its token rotated while signed in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from console_support import POLICY, csrf_of, sign_in
from principal_support import token_for
from starlette.testclient import TestClient

from sagafleet.console.app import create_app
from sagafleet.console.core import Console
from sagafleet.console.sessions import SessionStore

pytestmark = pytest.mark.integration


def _session_rows(fleet) -> int:
    with fleet.store.connection() as conn:
        return int(conn.execute("SELECT count(*) FROM fleet.console_sessions").fetchone()[0])


def test_a_page_without_a_session_redirects_to_sign_in(browser: TestClient) -> None:
    response = browser.get("/queue", headers={"accept": "text/html"})
    assert response.status_code == 303
    assert response.headers["location"] == "/sign-in?next=%2Fqueue"
    # a fragment or the event stream is answered 401, not redirected
    assert browser.get("/queue/fragment", headers={"x-sagafleet-fragment": "1"}).status_code \
        == 401
    assert browser.get("/live").status_code == 401


def test_signing_in_sets_a_strict_http_only_cookie_and_keeps_only_a_digest(
        fleet, browser: TestClient) -> None:
    token = token_for(fleet, "olivia", ("operator",))
    form = browser.get("/sign-in")
    response = browser.post("/sign-in", data={"csrf": csrf_of(form.text), "token": token,
                                              "next": "/queue"})
    assert response.status_code == 303 and response.headers["location"] == "/queue"
    cookie = next(v for k, v in response.headers.multi_items()
                  if k == "set-cookie" and v.startswith("sagafleet_session="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    session_id = browser.cookies["sagafleet_session"]
    with fleet.store.connection() as conn:
        stored = [row[0] for row in conn.execute("SELECT id_digest FROM fleet.console_sessions")]
    assert len(stored) == 1 and session_id not in stored[0] and token not in stored[0]
    page = browser.get("/queue")
    assert page.status_code == 200
    assert "olivia" in page.text and "tenant default" in page.text


def test_over_https_the_cookie_is_secure(fleet, console: Console) -> None:
    token = token_for(fleet, "olivia", ("operator",))
    with TestClient(create_app(console), base_url="https://console.example",
                    follow_redirects=False) as client:
        form = client.get("/sign-in")
        assert "Secure" in form.headers["set-cookie"]
        response = client.post("/sign-in", data={"csrf": csrf_of(form.text), "token": token})
        cookie = next(v for k, v in response.headers.multi_items()
                      if k == "set-cookie" and v.startswith("sagafleet_session="))
        assert "Secure" in cookie and "HttpOnly" in cookie


def test_a_wrong_token_or_a_forged_sign_in_form_signs_nobody_in(fleet, browser) -> None:
    form = browser.get("/sign-in")
    wrong = browser.post("/sign-in", data={"csrf": csrf_of(form.text), "token": "sft_nope"})
    assert wrong.status_code == 401 and "the token is not valid" in wrong.text
    token = token_for(fleet, "olivia", ("operator",))
    browser.cookies.clear()  # a post from another site carries no sign-in cookie
    forged = browser.post("/sign-in", data={"csrf": "guessed", "token": token})
    assert forged.status_code == 403 and "sagafleet_session" not in browser.cookies
    assert _session_rows(fleet) == 0


def test_sign_out_deletes_the_session(fleet, browser: TestClient, signed_in) -> None:
    signed_in("olivia", ("operator",))
    old = browser.cookies["sagafleet_session"]
    page = browser.get("/queue").text
    response = browser.post("/sign-out", data={"csrf": csrf_of(page)})
    assert response.status_code == 303 and response.headers["location"] == "/sign-in"
    assert _session_rows(fleet) == 0
    # the old cookie, replayed, opens nothing
    browser.cookies.set("sagafleet_session", old)
    assert browser.get("/queue", headers={"accept": "text/html"}).status_code == 303


def test_revoking_or_rotating_ends_the_principals_sessions_at_once(fleet, browser,
                                                                   signed_in) -> None:
    signed_in("olivia", ("operator",))
    assert browser.get("/queue").status_code == 200
    fleet.principals.rotate("default", "olivia")
    assert browser.get("/queue", headers={"accept": "text/html"}).status_code == 303
    sign_in(browser, token_for(fleet, "olivia"))  # the rotated token
    assert browser.get("/queue").status_code == 200
    fleet.principals.revoke("default", "olivia", "left")
    assert browser.get("/queue", headers={"accept": "text/html"}).status_code == 303
    assert _session_rows(fleet) == 0


class Clock:
    """A settable clock for the session store."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clocked(console: Console) -> Iterator[tuple[TestClient, Clock]]:
    clock = Clock()
    console.sessions = SessionStore(console.fleet.store, console.fleet.principals, POLICY,
                                    clock)
    with TestClient(create_app(console), follow_redirects=False) as client:
        yield client, clock


def test_a_session_ends_after_the_idle_timeout(fleet, clocked) -> None:
    client, clock = clocked
    sign_in(client, token_for(fleet, "olivia", ("operator",)))
    clock.now += POLICY.idle - timedelta(seconds=1)
    assert client.get("/queue").status_code == 200  # used just in time: still open
    clock.now += POLICY.idle + timedelta(seconds=1)
    assert client.get("/queue").status_code == 401
    assert _session_rows(fleet) == 0


def test_a_session_ends_after_its_absolute_lifetime_however_busy(fleet, clocked) -> None:
    client, clock = clocked
    sign_in(client, token_for(fleet, "olivia", ("operator",)))
    signed_in_at, step = clock.now, POLICY.idle / 2
    while clock.now + step < signed_in_at + POLICY.absolute:
        clock.now += step
        assert client.get("/queue").status_code == 200
    clock.now += step
    assert client.get("/queue").status_code == 401


def test_signing_in_again_ends_the_session_before(fleet, browser: TestClient) -> None:
    sign_in(browser, token_for(fleet, "olivia", ("operator",)))
    sign_in(browser, token_for(fleet, "oscar", ("operator",)))
    assert _session_rows(fleet) == 1
    assert "oscar" in browser.get("/queue").text


def test_live_refreshes_of_an_open_tab_do_not_keep_an_idle_session_alive(fleet, clocked) -> None:
    client, clock = clocked
    sign_in(client, token_for(fleet, "olivia", ("operator",)))
    refresh = {"x-sagafleet-fragment": "1"}
    for _ in range(3):  # the page refreshes itself through most of the idle timeout
        clock.now += POLICY.idle / 3 - timedelta(seconds=1)
        assert client.get("/queue/fragment", headers=refresh).status_code == 200
    clock.now += timedelta(seconds=5)  # the person did nothing for longer than the timeout
    assert client.get("/queue/fragment", headers=refresh).status_code == 401
    assert client.get("/queue").status_code == 401
