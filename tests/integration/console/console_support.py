"""What the console tests share: signing a test client in through the sign-in form."""

from __future__ import annotations

import re
from datetime import timedelta

from starlette.testclient import TestClient

from sagafleet.console.sessions import SessionPolicy

POLICY = SessionPolicy(idle=timedelta(minutes=30), absolute=timedelta(hours=12))
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: str) -> str:
    """The CSRF token of the first form on a page."""
    found = CSRF.search(page)
    assert found, "the page carries no form with a CSRF token"
    return found.group(1)


def sign_in(client: TestClient, token: str) -> None:
    """Sign ``client`` in with ``token`` through the sign-in form."""
    form = client.get("/sign-in")
    response = client.post("/sign-in", data={"csrf": csrf_of(form.text), "token": token,
                                             "next": "/queue"})
    assert response.status_code == 303, response.text
