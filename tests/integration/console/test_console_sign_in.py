"""Signing in to the console with an API token, the session cookie, expiry and sign-out."""

from __future__ import annotations

import pytest
from console_support import csrf_of
from principal_support import token_for
from starlette.testclient import TestClient

pytestmark = pytest.mark.integration


def test_a_page_without_a_session_redirects_to_sign_in(browser: TestClient) -> None:
    response = browser.get("/queue", headers={"accept": "text/html"})
    assert response.status_code == 303
    assert response.headers["location"] == "/sign-in?next=%2Fqueue"


def test_signing_in_with_a_token_sets_a_strict_http_only_cookie(fleet, browser) -> None:
    token = token_for(fleet, "olivia", ("operator",))
    form = browser.get("/sign-in")
    response = browser.post("/sign-in", data={"csrf": csrf_of(form.text), "token": token,
                                              "next": "/queue"})
    assert response.status_code == 303
    cookie = next(v for k, v in response.headers.multi_items()
                  if k == "set-cookie" and v.startswith("sagafleet_session="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    page = browser.get("/queue")
    assert page.status_code == 200
    assert "olivia" in page.text and "tenant default" in page.text
