"""A real fleet, a real console and a real browser for the console's browser tests.

One fleet per module (the scenarios share it, each on its own sagas, to keep the run short):
a fresh migrated database on the test PostgreSQL, the test Redis, two real ``sagafleet
worker`` processes, a projector and a sweeper thread in this process (what ``sagafleet
console`` and ``sagafleet sweeper`` run), and the console app served by uvicorn in a thread on
a free port. The browser is Debian's headless Chromium driven by Selenium through Debian's
chromedriver (``/usr/bin/chromium``, ``/usr/bin/chromedriver``; ``.ci/run`` installs both);
without them the tests are skipped, saying so. Screenshots go to ``tests/artifacts/console/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from browser_support import wait_until
from fleet_harness import SandboxFleet, WorkerProcesses, build_fleet, migrated_database
from principal_support import token_for
from selenium.webdriver.common.by import By

from projections import Projector
from sagafleet.console.app import create_app
from sagafleet.console.service import console_for
from sagafleet.console.sessions import SessionPolicy
from workers.celery_app import broker_redis
from workers.sweeper import Sweeper

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[4] / "artifacts" / "console"

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ConsoleWorld:
    """Everything a browser scenario needs: the fleet, the console's URL, the tokens."""

    fleet: SandboxFleet
    base_url: str
    tokens: dict[str, str]
    workers: WorkerProcesses

    def url(self, path: str) -> str:
        """An absolute URL of the console."""
        return self.base_url + path


class _Sweeping:
    """A sweeper in a thread, as ``sagafleet sweeper`` runs beside the fleet."""

    def __init__(self, fleet: SandboxFleet) -> None:
        self._sweeper = Sweeper(fleet)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-sweeper", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sweeper.sweep()
            except Exception:  # noqa: BLE001, S110 - a transient error: the next sweep retries
                pass
            self._stop.wait(0.5)

    def start(self) -> _Sweeping:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _need_chromium() -> None:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"the browser tests need Debian's chromium and chromium-driver "
                    f"({CHROMIUM}, {CHROMEDRIVER}); .ci/run installs them")


@pytest.fixture(scope="module")
def console_world(pg_server_url: str, broker_url: str,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleWorld]:
    """The fleet, its workers, a projector, a sweeper, and the console served over HTTP."""
    _need_chromium()
    redis = broker_redis(broker_url)
    redis.flushdb()
    with migrated_database(pg_server_url) as database:
        fleet = build_fleet(database, broker_url, worker_id="console-tests")
        workers = WorkerProcesses(database, broker_url, tmp_path_factory.mktemp("workers"))
        console = console_for(fleet, SessionPolicy())
        projector = Projector(console.read, poll_s=0.2).start()
        sweeping = _Sweeping(fleet).start()
        server = uvicorn.Server(uvicorn.Config(create_app(console), host="127.0.0.1",
                                               port=_free_port(), log_level="warning",
                                               lifespan="on"))
        thread = threading.Thread(target=server.run, name="console-http", daemon=True)
        try:
            workers.start(2)
            thread.start()
            for _ in range(200):
                if server.started:
                    break
                time.sleep(0.05)
            assert server.started, "the console never started serving"
            tokens = {
                "ana": token_for(fleet, "ana", ("approver",)),
                "otto": token_for(fleet, "otto", ("operator",)),
                "aude": token_for(fleet, "aude", ("auditor",)),
                "gina": token_for(fleet, "gina", ("approver", "operator"), tenant="globex"),
                "fiona": token_for(fleet, "fiona", ("fleet_operator",), tenant="fleet"),
            }
            port = server.config.port
            yield ConsoleWorld(fleet, f"http://127.0.0.1:{port}", tokens, workers)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
            sweeping.stop()
            projector.stop()
            workers.stop()
            fleet.close()
    redis.flushdb()
    redis.close()


@pytest.fixture(scope="module")
def browser(console_world: ConsoleWorld, chromium: Any) -> Any:
    """Headless Chromium for the scenarios of the shared console world."""
    return chromium


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Chromium under Selenium (one for the module; each test signs in afresh).

    Its profile and its temporary files (the singleton socket and cookie Chromium leaves in
    ``$TMPDIR`` as ``org.chromium.Chromium.*``) go to a folder of its own, removed after it
    quit: a run leaves nothing behind in /tmp."""
    _need_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    home = Path(tempfile.mkdtemp(prefix="sf-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,900", "--disable-extensions",
                     "--no-first-run", "--password-store=basic",
                     f"--user-data-dir={home / 'profile'}"):
        options.add_argument(argument)
    service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TMPDIR": str(home)})
    try:
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def screenshot() -> Callable[..., Path]:
    """Save the browser's page (or the element a CSS selector names) as
    ``tests/artifacts/console/<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def save(driver: Any, name: str, *, whole_page: bool = False, element: str = "") -> Path:
        path = ARTIFACTS / f"{name}.png"
        if element:  # looked up again if a live refresh replaced it meanwhile
            wait_until(driver, lambda d: d.find_element(By.CSS_SELECTOR, element)
                       .screenshot(str(path)))
        elif whole_page:  # the window made as tall as the page, for one picture of it all
            size = driver.get_window_size()
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(size["width"], min(int(height) + 120, 4000))
            try:
                driver.save_screenshot(str(path))
            finally:
                driver.set_window_size(size["width"], size["height"])
        else:  # the visible part of the page
            driver.save_screenshot(str(path))
        return path

    return save

