"""In Chromium: a page whose live stream is refused (its session holds as many as it may) or
dropped (the console restarted) comes back by itself, backing off meanwhile, and is live
again: a new entry then appears without a reload.

Each scenario has its own console (one stream per session) over the test's fleet, served by
uvicorn in a thread of this process, so the server's security log is captured here."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from browser_support import WAIT_S, wait_until
from console_support import start_waiting_capture
from principal_support import token_for
from read_model_support import project_all
from selenium.webdriver.common.by import By

from sagafleet.console.app import create_app
from sagafleet.console.core import Console
from sagafleet.console.gate import SESSION_COOKIE
from sagafleet.console.live import LiveHub, LiveLimits
from sagafleet.security_log import SECURITY_LOGGER

try:  # the HTTP client the mcp dependency brings
    import httpx2 as httpx
except ImportError:  # pragma: no cover - an environment with the original package
    import httpx  # type: ignore[no-redef]

pytestmark = pytest.mark.integration


class Served:
    """The console under uvicorn in a thread, restartable on the same port (a drop)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The console's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Serve; return once the server listens."""
        # A stream never ends by itself: at stop, open ones are cut after a second.
        self._server = uvicorn.Server(uvicorn.Config(
            create_app(self.console), host="127.0.0.1", port=self.port,
            log_level="warning", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30  # only ends a hung start
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "never started"
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop serving (every open connection is dropped)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._server = self._thread = None


@pytest.fixture
def served(console: Console) -> Iterator[Served]:
    """A console whose sessions may hold one live stream each."""
    console.live = LiveHub(console.fleet.store, heartbeat_s=1.0,
                           limits=LiveLimits(per_session=1))
    running = Served(console)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> Callable[[], int]:
    """How many live streams the server has refused so far (its security log)."""
    caplog.set_level(logging.WARNING, logger=SECURITY_LOGGER)

    def count() -> int:
        return sum(1 for r in list(caplog.records) if r.name == SECURITY_LOGGER
                   and json.loads(r.getMessage()).get("path") == "/live")
    return count


def _sign_in(driver: Any, served: Served, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(served.url + "/sign-in?next=/queue")
    field = driver.find_element(By.ID, "token")
    field.send_keys(token)
    field.submit()
    wait_until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "header .principal"))


def _status(driver: Any) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, ".live-status").text)


def _shows(driver: Any, saga_id: str) -> bool:
    return bool(driver.find_elements(By.CSS_SELECTOR, f'[data-saga="{saga_id}"]'))


def test_a_refused_page_backs_off_and_goes_live_once_there_is_room(
        fleet, chromium, served, refusals):
    driver = chromium
    _sign_in(driver, served, token_for(fleet, "ana", ("approver",)))
    wait_until(driver, lambda d: _status(d) == "live")
    cookie = driver.get_cookie(SESSION_COOKIE)["value"]
    # given the page's session made to hold its one stream elsewhere (another tab, say)
    driver.get("about:blank")  # the page's own stream closes with it
    wait_until(driver, lambda d: served.console.live.subscribers == 0)
    other_tab = httpx.Client(base_url=served.url, cookies={SESSION_COOKIE: cookie},
                             timeout=30)
    with other_tab.stream("GET", "/live") as held:
        assert held.status_code == 200
        lines = held.iter_lines()
        assert next(lines).startswith("retry:")
        # when the queue page opens: its stream is refused, again and again (backing off)
        driver.get(served.url + "/queue")
        wait_until(driver, lambda d: refusals() >= 2)
        assert _status(driver) == "reconnecting…"
        assert served.console.live.subscribers == 1
    other_tab.close()
    # then, the other stream closed, the page goes live by itself (no reload)
    wait_until(driver, lambda d: _status(d) == "live")
    wait_until(driver, lambda d: served.console.live.subscribers == 1)
    # and a new entry appears on it when the read models move
    saga_id = start_waiting_capture(fleet)
    project_all(served.console.read)
    wait_until(driver, lambda d: _shows(d, saga_id), timeout=WAIT_S)


def test_a_dropped_stream_reconnects_after_the_console_restarts(fleet, chromium, served):
    driver = chromium
    _sign_in(driver, served, token_for(fleet, "otto", ("operator", "approver")))
    wait_until(driver, lambda d: _status(d) == "live")
    # when the console stops (every connection dropped) and starts again on its port
    served.stop()
    wait_until(driver, lambda d: _status(d) == "reconnecting…")
    served.start()
    # then the page reconnects by itself, and is live again
    wait_until(driver, lambda d: _status(d) == "live")
    wait_until(driver, lambda d: served.console.live.subscribers == 1)
    saga_id = start_waiting_capture(fleet)
    project_all(served.console.read)
    wait_until(driver, lambda d: _shows(d, saga_id), timeout=WAIT_S)
