"""The health, dead-letter and worker pages in a real browser, on a real fleet.

Given a few trips that completed and one that compensated, and an unsigned agent command the
workers dead-lettered: the health page draws every chart with bars where sagas finished and
shows each alert's state; an operator lists, opens and discards the dead letter with a reason
(a second discard does nothing); an approver sees only how many there are; the workers page
lists the running workers by hostname; ``/healthz`` answers without a session.
"""

from __future__ import annotations

import time
import urllib.request

from browser_support import post_form, sign_in, sign_out, wait_until
from selenium.webdriver.common.by import By
from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from saga_core.contracts import SagaStatus

CHARTS = ("throughput", "compensation-rate", "manual-intervention-rate", "time-to-terminal",
          "retry-amplification", "projection-lag", "alerts-firing")


def _settle(fleet, saga_ids, timeout=90.0):
    deadline = time.monotonic() + timeout
    states = {}
    while time.monotonic() < deadline:
        states = {s: fleet.repo.load(s).state.status for s in saga_ids}
        if all(state.is_terminal for state in states.values()):
            return states
        time.sleep(0.2)
    raise AssertionError(f"sagas not finished: {states}")


def _dead_letter(fleet, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        letters = fleet.dead_letters.open_letters()
        if letters:
            return letters[0]
        time.sleep(0.2)
    raise AssertionError("the unsigned command was never dead-lettered")


def test_health_charts_dead_letters_and_workers(console_world, browser, screenshot):
    fleet = console_world.fleet
    client = fleet.client()
    # given two trips that complete and one whose itinerary bounces (it compensates)
    sagas = [client.start("trip", TRIP_INPUT, key="health-1").saga_id,
             client.start("trip", TRIP_INPUT | {"nights": 3}, key="health-2").saga_id,
             client.start("trip", BOUNCING_INPUT, key="health-3").saga_id]
    states = _settle(fleet, sagas)
    assert sorted(states.values()) == sorted([SagaStatus.COMPLETED, SagaStatus.COMPLETED,
                                              SagaStatus.COMPENSATED])
    # and an agent command sent without a signature, which the workers dead-letter
    fleet.celery.send_task("sagafleet.commands.start_saga",
                           kwargs={"definition": "trip", "input": {"flight_id": "<b>x</b>"}})
    letter = _dead_letter(fleet)

    # when an operator opens the health page
    sign_in(browser, console_world, "otto", next_path="/health")
    # then every chart is drawn, and the throughput and compensation charts have bars once
    # the read models hold the finished sagas (the page refreshes itself when they move)
    for chart in CHARTS:
        assert browser.find_elements(By.CSS_SELECTOR, f"figure.{chart} svg.chart"), chart
    wait_until(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, "figure.compensation-rate rect.bar"))
    # (the page replaces its fragments whenever the read models move, so every look at
    # them is taken inside wait_until, which looks again at an element that went stale)
    titles = wait_until(browser, lambda d: " ".join(
        b.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        for b in d.find_elements(By.CSS_SELECTOR, "figure.throughput rect.bar")))
    assert "/min" in titles, "no throughput bar"
    # and each alert kind shows its state (nothing is at risk here: all clear)
    states = wait_until(browser, lambda d: [
        row.text for row in d.find_elements(By.CSS_SELECTOR, "tr.alert-state")])
    assert len(states) == 4
    assert all("clear" in text for text in states), states
    assert browser.find_elements(By.CSS_SELECTOR, ".live-status.on") or wait_until(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".live-status.on"))
    screenshot(browser, "health", whole_page=True)
    browser.get(console_world.url("/health?window=24h"))
    assert browser.find_element(By.CSS_SELECTOR, "nav.windows a.current").text == "24h"

    # when the operator opens the dead letters
    browser.find_element(By.LINK_TEXT, "Dead letters").click()
    row = wait_until(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, f"tr.dead-letter[data-letter='{letter.id}']"))[0]
    assert "sagafleet.commands.start_saga" in row.text and "unsigned" in row.text
    screenshot(browser, "dead-letters")
    row.find_element(By.TAG_NAME, "a").click()
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "form.discard"))
    # the agent's HTML in the message is shown as text, not markup
    assert "<b>x</b>" in browser.find_element(By.CSS_SELECTOR, "dl.letter").text
    assert not browser.find_elements(By.CSS_SELECTOR, "dl.letter b")
    screenshot(browser, "dead-letter")
    # and discards it, saying why
    form = browser.find_element(By.CSS_SELECTOR, "form.discard")
    form.find_element(By.NAME, "reason").send_keys("a test command, never signed")
    form.find_element(By.TAG_NAME, "button").click()
    notice = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))[0]
    assert f"Dead letter #{letter.id} discarded by you" in notice.text
    # then the letter records who and why, and a second discard does nothing
    stored = fleet.dead_letters.get(letter.id)
    assert (stored.status, stored.resolved_by) == ("discarded", "otto")
    assert stored.resolution == "a test command, never signed"
    assert not browser.find_elements(By.CSS_SELECTOR, "form.discard")  # no action is left
    # (a second discard, as a form posted again, is answered "already", changing nothing)
    post_form(browser, f"/dead-letters/{letter.id}/discard", {"reason": "again"})
    wait_until(browser, lambda d: "nothing was done again" in d.page_source)
    assert fleet.dead_letters.get(letter.id).resolution == "a test command, never signed"

    # when the operator opens the workers page
    browser.find_element(By.LINK_TEXT, "Workers").click()
    rows = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.worker"))
    # then both running workers are listed by hostname, with what they processed
    pids = {str(p.pid) for p in console_world.workers.alive()}
    shown = {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}
    assert pids <= shown, (pids, shown)
    screenshot(browser, "workers")
    sign_out(browser)

    # when an approver (no operator role) opens the dead letters
    sign_in(browser, console_world, "ana", next_path="/dead-letters")
    # then it sees how many are open and which role lists them, never their content
    notice = browser.find_element(By.CSS_SELECTOR, "p.notice").text
    assert "only a principal with the operator role" in notice
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.dead-letter")
    browser.get(console_world.url(f"/dead-letters/{letter.id}"))
    assert "Not permitted" in browser.find_element(By.TAG_NAME, "h1").text
    sign_out(browser)

    # and the liveness probe answers without any session
    with urllib.request.urlopen(console_world.url("/healthz"), timeout=10) as response:  # noqa: S310
        assert response.status == 200 and response.read() == b"ok\n"
