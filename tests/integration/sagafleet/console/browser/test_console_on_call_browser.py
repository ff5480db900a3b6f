"""The on-call seat in a real Chromium on a real fleet: with four requests waiting the first
Approve is above the fold at 1280x800 and a request is approved three interactions after the
token; a reason is denied with the keyboard alone; a live refresh merges around the line a
person is typing in; every page fits 390, 768 and 1280 px in light and dark, with no serious
or critical axe-core finding. The figures measured are written beside the screenshots
(``.ci/artifacts/screenshots/``, git-ignored): ``figures.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from browser_support import WAIT_S, sign_in, wait_until
from principal_support import token_for
from selenium.common.exceptions import (
    ElementNotInteractableException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from trip_inputs import TRIP_INPUT

from saga_core.engine.events import ApprovalDenied, ApprovalGranted

GATED = TRIP_INPUT | {"amount": 250_000}  # above the trip's 1000.00 capture limit
ROOT = Path(__file__).resolve().parents[5]
SHOTS = ROOT / ".ci" / "artifacts" / "screenshots"
AXE = Path(os.environ.get("SAGAFLEET_AXE_JS",
                          ROOT / ".ci" / "node_modules" / "axe-core" / "axe.min.js"))
WIDTHS = {"desktop": (1280, 800), "tablet": (768, 1024), "phone": (390, 844)}
FIGURES: dict[str, Any] = {}


def _line(saga_id: str) -> str:
    return f"article.queue-item[data-saga='{saga_id}']"


def _answers(fleet, saga_id: str) -> list[object]:
    return [e for e in fleet.repo.load_history(saga_id).events
            if isinstance(e, ApprovalGranted | ApprovalDenied)]


def _waiting(fleet, saga_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fleet.client().status(saga_id).pending_approvals:
            return
        time.sleep(0.1)
    raise AssertionError(f"saga {saga_id} never asked for an approval")


def _viewport(driver, width: int, height: int, *, dark: bool = False) -> None:
    """The page's viewport exactly ``width`` x ``height`` CSS pixels, in the theme asked."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})


def _on(driver, selector: str, act) -> None:
    """Do ``act`` to the element ``selector`` names, looked up afresh when a live refresh
    replaced it between the look and the act (until it is in hand, a line may be)."""
    WebDriverWait(driver, WAIT_S, poll_frequency=0.1, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException,
        ElementNotInteractableException)).until(
        lambda d: act(d.find_element(By.CSS_SELECTOR, selector)) or True)


def _record(name: str, value: object) -> None:
    FIGURES[name] = value
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "figures.json").write_text(json.dumps(FIGURES, indent=2, sort_keys=True))


@pytest.fixture(scope="module")
def four_waiting(console_world) -> list[str]:
    """Four trips whose captures wait for an approver."""
    fleet = console_world.fleet
    ids = [fleet.client().start("trip", GATED | {"nights": 2 + n}, key=f"on-call-{n}").saga_id
           for n in range(4)]
    for saga_id in ids:
        _waiting(fleet, saga_id)
    return ids


@pytest.fixture
def desktop(browser):
    _viewport(browser, *WIDTHS["desktop"])
    yield browser
    _viewport(browser, *WIDTHS["desktop"])


def _first_approve(driver) -> Any:
    return wait_until(driver, lambda d: d.find_element(
        By.CSS_SELECTOR, "#queue article.queue-item form.decide button[value=approve]"))


def test_with_four_waiting_the_first_approve_is_above_the_fold_and_three_interactions_approve(
    console_world, desktop, four_waiting
):
    fleet = console_world.fleet
    browser = desktop
    # given four requests waiting, and the approver at the sign-in page with her token
    browser.delete_all_cookies()
    browser.get(console_world.url("/sign-in"))
    field = browser.find_element(By.ID, "token")
    field.send_keys(console_world.tokens["ana"])
    interactions = 1
    field.submit()  # 1: sign in (the token is pasted)
    wait_until(browser, lambda d: len(d.find_elements(
        By.CSS_SELECTOR, "#queue article.queue-item")) >= 4)
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".live-status.on"))
    # then the first request's Approve is visible without scrolling at 1280x800
    _first_approve(browser)
    box = browser.execute_script(
        "const b = document.querySelector("
        "  '#queue article.queue-item form.decide button[value=approve]');"
        "const r = b.getBoundingClientRect();"
        "return {top: r.top, bottom: r.bottom, fold: window.innerHeight,"
        "        scrollY: window.scrollY, saga: b.closest('article').dataset.saga};")
    assert box["scrollY"] == 0 and box["bottom"] <= box["fold"], box
    heights = browser.execute_script(
        "return Array.from(document.querySelectorAll('#queue article.queue-item'))"
        ".map(e => e.getBoundingClientRect().height);")
    _record("first_approve_px_from_top", round(box["top"], 1))
    _record("fold_px", box["fold"])
    _record("line_height_px", round(max(heights), 1))
    browser.save_screenshot(str(SHOTS / "queue-four-waiting-1280x800.png"))
    # when she types a reason and presses Approve on the first line
    saga_id = box["saga"]
    _on(browser, f"{_line(saga_id)} form.decide input[name=reason]",
        lambda field: field.send_keys("customer confirmed"))
    interactions += 1  # 2: the reason
    _on(browser, f"{_line(saga_id)} form.decide button[value=approve]",
        lambda approve: approve.click())
    interactions += 1  # 3: Approve
    notice = wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, "p.notice.ok").text)
    # then it is approved, three interactions after the token
    assert notice.startswith("Approved saga"), notice
    [grant] = _answers(fleet, saga_id)
    assert isinstance(grant, ApprovalGranted) and grant.approver == "ana"
    assert grant.reason == "customer confirmed"
    assert interactions <= 3
    _record("interactions_after_token_to_approved", interactions)


def test_a_request_is_denied_with_the_keyboard_alone_and_enter_in_the_reason_submits_nothing(
    console_world, desktop, four_waiting
):
    fleet = console_world.fleet
    browser = desktop
    sign_in(browser, console_world, "ana")
    saga_id = next(s for s in four_waiting if not _answers(fleet, s))
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, _line(saga_id)))
    reason = f"{_line(saga_id)} form.decide input[name=reason]"

    def focused_matches(selector: str) -> bool:
        return bool(browser.execute_script(
            "return document.activeElement === document.querySelector(arguments[0]);",
            selector))

    # when she tabs from the top of the page to the line's reason
    browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
    for _ in range(400):
        if focused_matches(reason):
            break
        browser.switch_to.active_element.send_keys(Keys.TAB)
    assert focused_matches(reason), "tabbing never reached the line's reason"
    browser.switch_to.active_element.send_keys("wrong hotel")
    # and presses Enter in it: nothing is submitted (a decision is always a button)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    time.sleep(0.3)  # a submission would navigate; give it the chance to (not a threshold)
    assert _answers(fleet, saga_id) == [] and "/queue" in browser.current_url
    # when she tabs on to Deny and presses Enter
    deny = f"{_line(saga_id)} form.decide button[value=deny]"
    for _ in range(5):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if focused_matches(deny):
            break
    assert focused_matches(deny)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    # then the request is denied with her reason
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))
    [denial] = _answers(fleet, saga_id)
    assert isinstance(denial, ApprovalDenied) and denial.reason == "wrong hotel"
    _record("keyboard_only_deny", "works")


def test_a_live_refresh_keeps_the_line_being_typed_in_and_moves_the_rest(
    console_world, desktop, four_waiting
):
    fleet = console_world.fleet
    browser = desktop
    sign_in(browser, console_world, "ana")
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".live-status.on"))
    waiting = [s for s in four_waiting if not _answers(fleet, s)]
    assert len(waiting) >= 2
    typed, ticked = waiting[0], waiting[1]
    # given a half-typed reason in one line (focus in it) and another line's box ticked
    _on(browser, f"{_line(ticked)} input.select", lambda box: box.click())
    _on(browser, f"{_line(typed)} form.decide input[name=reason]",
        lambda field: field.send_keys("checking with the cust"))
    # when a new request arrives and the list refreshes
    newcomer = fleet.client().start("trip", GATED | {"nights": 9}, key="on-call-new").saga_id
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, _line(newcomer)))
    # then the list moved (not frozen), and the typed reason, its focus and the tick remain
    state = browser.execute_script(
        "const f = document.querySelector(arguments[0]);"
        "return {value: f.value, focused: document.activeElement === f,"
        "        ticked: document.querySelector(arguments[1]).checked};",
        f"{_line(typed)} form.decide input[name=reason]", f"{_line(ticked)} input.select")
    assert state == {"value": "checking with the cust", "focused": True, "ticked": True}, state
    # and she finishes typing and approves, without a reload
    browser.switch_to.active_element.send_keys("omer")
    browser.find_element(By.CSS_SELECTOR, f"{_line(typed)} form.decide button[value=approve]"
                         ).click()
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))
    [grant] = _answers(fleet, typed)
    assert isinstance(grant, ApprovalGranted) and grant.reason == "checking with the customer"
    _waiting(fleet, newcomer)


def _axe(driver) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is."""
    driver.execute_script(AXE.read_text())
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then(r => done({violations: r.violations.map(v => ({id: v.id, impact: v.impact,"
        "  nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})),"
        "  passes: r.passes.length}))"
        ".catch(e => done({error: String(e)}));")
    assert "error" not in result, result
    return [v for v in result["violations"] if v["impact"] in ("serious", "critical")]


def test_every_page_fits_every_width_in_both_themes_with_no_serious_axe_finding(
    console_world, browser, four_waiting
):
    if not AXE.exists():
        pytest.skip(f"axe-core is not installed at {AXE} (.ci/run installs it from npm: "
                    "npm install --prefix .ci axe-core)")
    browser.set_script_timeout(60)
    console_world.tokens["olga"] = token_for(console_world.fleet, "olga",
                                             ("approver", "operator"))
    sign_in(browser, console_world, "olga")
    saga_id = four_waiting[-1]
    pages = {"queue": "/queue", "sagas": "/sagas", "saga": f"/sagas/{saga_id}",
             "health": "/health", "dead-letters": "/dead-letters", "workers": "/workers"}
    findings: dict[str, list[dict[str, Any]]] = {}
    overflow: dict[str, int] = {}
    shots = []
    try:
        for theme in ("light", "dark"):
            for label, (width, height) in WIDTHS.items():
                _viewport(browser, width, height, dark=theme == "dark")
                for name, path in pages.items():
                    browser.get(console_world.url(path))
                    wait_until(browser, lambda d: d.find_elements(By.TAG_NAME, "h1"))
                    key = f"{name}-{width}x{height}-{theme}"
                    wide = browser.execute_script(
                        "return document.documentElement.scrollWidth - window.innerWidth;")
                    if wide > 0:
                        overflow[key] = wide
                    browser.save_screenshot(str(SHOTS / f"{key}.png"))
                    shots.append(key)
                    if label != "tablet":  # axe at the two ends of the range, both themes
                        found = _axe(browser)
                        if found:
                            findings[key] = found
        # and the sign-in page (signed out), in both themes at phone width
        browser.delete_all_cookies()
        for theme in ("light", "dark"):
            _viewport(browser, *WIDTHS["phone"], dark=theme == "dark")
            browser.get(console_world.url("/sign-in"))
            key = f"sign-in-390x844-{theme}"
            browser.save_screenshot(str(SHOTS / f"{key}.png"))
            shots.append(key)
            if found := _axe(browser):
                findings[key] = found
    finally:
        _viewport(browser, *WIDTHS["desktop"])
    _record("screenshots", len(shots))
    _record("axe_serious_or_critical", sum(len(v) for v in findings.values()))
    _record("horizontal_overflow_px", overflow)
    _record("axe_findings", findings)
    assert not overflow, overflow
    assert not findings, json.dumps(findings, indent=1)
