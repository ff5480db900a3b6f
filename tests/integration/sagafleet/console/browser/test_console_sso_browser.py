"""Single sign-on in a real browser: Chromium signs in to the console through a real OpenID
provider (npm oidc-provider on loopback, its own login and consent pages) and approves a
request; a person in no console group is refused with a page that says why.

Counted on the way (the issue's measure): the person's interactions from the sign-in page to
the queue (click the provider's button, submit the provider's login form, confirm the consent)
and from the queue to an approval (type the reason, click Approve). Typing the login and
password fills the form that one submit sends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from browser_support import wait_until
from console_support import start_waiting_capture
from fleet_harness import SandboxFleet, build_fleet, migrated_database
from oidc_provider import (
    OidcProviderProcess,
    free_port,
    installed_provider,
    need_node,
    oidc_env,
)
from selenium.webdriver.common.by import By

from projections import Projector
from saga_core.engine.events import ApprovalGranted
from sagafleet.console.app import create_app
from sagafleet.console.service import console_for
from sagafleet.console.sessions import SessionPolicy
from sagafleet.settings import Settings
from sagafleet.sso_settings import oidc_settings
from workers.celery_app import broker_redis

pytestmark = pytest.mark.integration


@dataclass
class SsoWorld:
    fleet: SandboxFleet
    base_url: str
    provider: OidcProviderProcess

    def url(self, path: str) -> str:
        return self.base_url + path


@pytest.fixture(scope="module")
def sso_world(pg_server_url: str, broker_url: str, chromium: Any,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[SsoWorld]:
    """A fleet, a projector, the provider and the console (single sign-on on) over HTTP."""
    node, npm = need_node()
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    provider = OidcProviderProcess(node, tmp_path_factory.mktemp("oidc-provider"),
                                   installed_provider(npm), free_port(),
                                   redirect_uri=base_url + "/sign-in/oidc/callback")
    redis = broker_redis(broker_url)
    redis.flushdb()
    provider.start()
    try:
        with migrated_database(pg_server_url) as database:
            fleet = build_fleet(database, broker_url, worker_id="console-sso-tests")
            sso = oidc_settings(Settings.from_env(oidc_env(provider.issuer,
                                                           provider.redirect_uri)))
            console = console_for(fleet, SessionPolicy(), sso=sso)
            projector = Projector(console.read, poll_s=0.2).start()
            server = uvicorn.Server(uvicorn.Config(create_app(console), host="127.0.0.1",
                                                   port=port, log_level="warning",
                                                   lifespan="on"))
            thread = threading.Thread(target=server.run, name="console-http", daemon=True)
            try:
                thread.start()
                for _ in range(200):
                    if server.started:
                        break
                    time.sleep(0.05)
                assert server.started, "the console never started serving"
                yield SsoWorld(fleet, base_url, provider)
            finally:
                server.should_exit = True
                thread.join(timeout=30)
                projector.stop()
                fleet.close()
    finally:
        provider.stop()
        redis.flushdb()
        redis.close()


def _click(driver: Any, css: str) -> None:
    wait_until(driver, lambda d: d.find_element(By.CSS_SELECTOR, css)).click()


def _sign_in_by_sso(driver: Any, world: SsoWorld, login: str) -> int:
    """From the console's sign-in page through the provider's pages; the interactions."""
    driver.delete_all_cookies()
    driver.get(world.url("/sign-in?next=/queue"))
    interactions = 1
    _click(driver, "a.button.sso")
    login_field = wait_until(driver, lambda d: d.find_element(By.NAME, "login"))
    login_field.send_keys(login)
    driver.find_element(By.NAME, "password").send_keys("any-password")
    interactions += 1
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # the login page gone: the provider's consent page (or, consented before, the console)
    wait_until(driver, lambda d: not d.find_elements(By.NAME, "login"))
    if driver.current_url.startswith(world.provider.issuer):
        interactions += 1
        _click(driver, "button[type=submit]")
        wait_until(driver, lambda d: d.current_url.startswith(world.base_url))
    return interactions


def test_a_person_signs_in_through_the_provider_and_approves_in_five_interactions(
        sso_world: SsoWorld, chromium: Any, screenshot: Any) -> None:
    # given a request waiting for a person
    saga_id = start_waiting_capture(sso_world.fleet, key="sso-browser")
    card = f"article.queue-item[data-saga='{saga_id}']"

    # when ada signs in through the company's provider
    chromium.delete_all_cookies()
    chromium.get(sso_world.url("/sign-in"))
    assert "Sign in with Test IdP" in chromium.find_element(By.CSS_SELECTOR, "a.button.sso").text
    screenshot(chromium, "sign-in-sso")
    to_queue = _sign_in_by_sso(chromium, sso_world, "ada")

    # then she is on the queue, signed in as a person principal, by a Strict session cookie
    who = wait_until(chromium, lambda d: d.find_element(By.CSS_SELECTOR, "header .principal"))
    assert who.text.startswith("ada") and chromium.current_url.endswith("/queue")
    session = chromium.get_cookie("sagafleet_session")
    assert session["httpOnly"] is True and session["sameSite"] == "Strict"
    assert to_queue == 3

    # when she approves the waiting request with a reason
    reason = wait_until(chromium, lambda d: d.find_element(
        By.CSS_SELECTOR, f"{card} form.approve input[name=reason]"))
    reason.send_keys("checked with the customer")
    chromium.find_element(By.CSS_SELECTOR, f"{card} form.approve button").click()
    to_approved = 2
    notice = wait_until(chromium, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))[0]
    assert notice.text.startswith("Approved saga")
    screenshot(chromium, "queue-approved-sso")

    # then the log names her as the approver, and it took 3 + 2 interactions
    grants = [e for e in sso_world.fleet.repo.load_history(saga_id).events
              if isinstance(e, ApprovalGranted)]
    assert len(grants) == 1 and grants[0].approver == "ada", grants
    assert (to_queue, to_approved) == (3, 2)


def test_a_person_in_no_console_group_sees_why_they_are_refused(
        sso_world: SsoWorld, chromium: Any, screenshot: Any) -> None:
    _sign_in_by_sso(chromium, sso_world, "eve")
    heading = wait_until(chromium, lambda d: d.find_element(By.TAG_NAME, "h1"))
    assert heading.text == "Single sign-on refused"
    notice = chromium.find_element(By.CSS_SELECTOR, "p.notice.error").text
    assert "eve is in no group that grants a console role" in notice
    assert chromium.get_cookie("sagafleet_session") is None
    screenshot(chromium, "sign-in-sso-refused")
