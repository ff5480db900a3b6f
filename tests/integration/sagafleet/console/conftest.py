"""Fixtures of the console tests: a console over the test's real fleet (PostgreSQL and Redis),
served in process by Starlette's TestClient, and signing in as a principal of the directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from console_support import POLICY, sign_in
from principal_support import token_for
from starlette.testclient import TestClient

from sagafleet.console.app import create_app
from sagafleet.console.core import Console
from sagafleet.console.service import console_for
from workers.fleet import Fleet


@pytest.fixture
def console(fleet: Fleet) -> Console:
    """The console of the test's fleet (its store, principals and client)."""
    return console_for(fleet, POLICY)


@pytest.fixture
def browser(console: Console) -> Iterator[TestClient]:
    """A client of the console app (lifespan run: the live hub listens)."""
    with TestClient(create_app(console), base_url="http://testserver",
                    follow_redirects=False) as client:
        yield client


SignIn = Callable[..., str]


@pytest.fixture
def signed_in(fleet: Fleet, browser: TestClient) -> SignIn:
    """Sign the browser in as a new principal of ``roles``; returns its token."""

    def sign(name: str = "olivia", roles: tuple[str, ...] = ("operator", "approver"), *,
             tenant: str = "default") -> str:
        token = token_for(fleet, name, roles, tenant=tenant)
        sign_in(browser, token)
        return token

    return sign
