"""The health, dead-letter and worker pages in a real browser, on a real fleet.

Given a few trips that completed and one that compensated, and two agent commands the workers
dead-lettered — one signed by an agent of tenant default (for a definition nobody registered),
one unsigned (no tenant is proven to own it): the health page draws every chart with bars
where sagas finished and shows each alert's state; default's operator lists, opens and
discards its tenant's letter with a reason (a second discard does nothing) and never sees the
unsigned one, which is "not found" to it; another tenant's operator sees neither; the fleet
operator lists the unsigned letter alone and discards it; an approver sees only how many of
its tenant's are open; the workers page lists the running workers by hostname to the fleet
operator only; ``/healthz`` answers without a session.
"""

from __future__ import annotations

import time
import urllib.request

from browser_support import post_form, sign_in, sign_out, wait_until
from selenium.webdriver.common.by import By
from signed_agent import agent_signer, send
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


def _dead_letters(fleet, count, timeout=60.0):
    """tenant -> id of the open dead letters, once ``count`` are kept (read from the table:
    the test sees every tenant's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with fleet.store.connection() as conn:
            rows = conn.execute("SELECT tenant, id FROM fleet.dead_letters"
                                " WHERE status = 'open'").fetchall()
        if len(rows) >= count:
            return dict(rows)
        time.sleep(0.2)
    raise AssertionError("the commands were never dead-lettered")


def _letter_state(fleet, letter):
    with fleet.store.connection() as conn:
        return conn.execute("SELECT status, resolved_by, resolution FROM fleet.dead_letters"
                            " WHERE id = %s", (letter,)).fetchone()


def _rows(browser):
    return wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "table.dead-letters")
                      or d.find_elements(By.CSS_SELECTOR, "p.notice")) and [
        row.get_attribute("data-letter")
        for row in browser.find_elements(By.CSS_SELECTOR, "tr.dead-letter")]


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
    # and an agent of tenant default that signs a start of a definition nobody registered
    # (its reason carries HTML), and a command sent without a signature, naming default as
    # its tenant: the workers dead-letter both
    signer = agent_signer(fleet, "default", "health-bot")
    send(fleet.celery, signer.start_saga("no-such-trip", {"nights": 1}, reason="<b>x</b>"))
    fleet.celery.send_task("sagafleet.commands.start_saga",
                           kwargs={"definition": "trip", "tenant": "default",
                                   "input": {"flight_id": "<b>y</b>"}})
    letters = _dead_letters(fleet, 2)
    own, unknown = letters["default"], letters[None]

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

    # when default's operator opens the dead letters
    browser.find_element(By.LINK_TEXT, "Dead letters").click()
    row = wait_until(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, f"tr.dead-letter[data-letter='{own}']"))[0]
    # then it lists its tenant's letter alone, never the unsigned one
    assert "sagafleet.commands.start_saga" in row.text and "default" in row.text
    assert _rows(browser) == [str(own)]
    screenshot(browser, "dead-letters")
    row.find_element(By.TAG_NAME, "a").click()
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "form.discard"))
    # the agent's HTML in the message is shown as text, not markup
    assert "<b>x</b>" in browser.find_element(By.CSS_SELECTOR, "dl.letter").text
    assert not browser.find_elements(By.CSS_SELECTOR, "dl.letter b")
    screenshot(browser, "dead-letter")
    # and discards it, saying why
    form = browser.find_element(By.CSS_SELECTOR, "form.discard")
    form.find_element(By.NAME, "reason").send_keys("no such definition, never will be")
    form.find_element(By.TAG_NAME, "button").click()
    notice = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))[0]
    assert f"Dead letter #{own} discarded by you" in notice.text
    # then the letter records who and why, and a second discard does nothing
    assert _letter_state(fleet, own) == ("discarded", "otto",
                                         "no such definition, never will be")
    assert not browser.find_elements(By.CSS_SELECTOR, "form.discard")  # no action is left
    # (a second discard, as a form posted again, is answered "already", changing nothing)
    post_form(browser, f"/dead-letters/{own}/discard", {"reason": "again"})
    wait_until(browser, lambda d: "nothing was done again" in d.page_source)
    assert _letter_state(fleet, own)[2] == "no such definition, never will be"
    # and the unsigned letter is not found to it, opened or discarded (as devtools could)
    browser.get(console_world.url(f"/dead-letters/{unknown}"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"
    assert "<b>y</b>" not in browser.page_source
    post_form(browser, f"/dead-letters/{unknown}/discard", {"reason": "mine?"})
    wait_until(browser, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Not found")
    assert _letter_state(fleet, unknown) == ("open", None, None)

    # when the operator opens the workers page
    browser.find_element(By.LINK_TEXT, "Workers").click()
    summary = wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR,
                                                           "p.workers-summary"))
    # then it learns how many answer, and nothing of what they run (every tenant's work)
    assert "worker(s) answered" in summary.text and "fleet_operator" in summary.text
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.worker")
    sign_out(browser)

    # when another tenant's operator opens the dead letters and default's letter
    sign_in(browser, console_world, "gina", next_path="/dead-letters")
    # then it lists none of them, and default's letter is not found
    assert _rows(browser) == []
    browser.get(console_world.url(f"/dead-letters/{own}"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"
    sign_out(browser)

    # when the fleet operator opens the dead letters
    sign_in(browser, console_world, "fiona", next_path="/dead-letters")
    # then it lists the unsigned letter alone, marked as of no proven tenant
    assert _rows(browser) == [str(unknown)]
    row = browser.find_element(By.CSS_SELECTOR, f"tr.dead-letter[data-letter='{unknown}']")
    assert "unknown" in row.text and "identity_in_message" in row.text
    screenshot(browser, "dead-letters-fleet")
    # and discards it
    row.find_element(By.TAG_NAME, "a").click()
    form = wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, "form.discard"))
    assert "<b>y</b>" in browser.find_element(By.CSS_SELECTOR, "dl.letter").text
    form.find_element(By.NAME, "reason").send_keys("an unsigned test command")
    form.find_element(By.TAG_NAME, "button").click()
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))
    assert _letter_state(fleet, unknown) == ("discarded", "fiona", "an unsigned test command")
    # and on the workers page, both running workers are listed by hostname, with their work
    browser.find_element(By.LINK_TEXT, "Workers").click()
    rows = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.worker"))
    pids = {str(p.pid) for p in console_world.workers.alive()}
    shown = {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}
    assert pids <= shown, (pids, shown)
    screenshot(browser, "workers")
    sign_out(browser)

    # when an approver (no operator role) opens the dead letters
    sign_in(browser, console_world, "ana", next_path="/dead-letters")
    # then it sees how many of its tenant's are open and which role lists them, never their
    # content
    notice = browser.find_element(By.CSS_SELECTOR, "p.notice").text
    assert "0 open dead letter(s) of tenant default" in notice
    assert "Only a principal with the operator role" in notice
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.dead-letter")
    browser.get(console_world.url(f"/dead-letters/{own}"))
    assert "Not permitted" in browser.find_element(By.TAG_NAME, "h1").text
    sign_out(browser)

    # and the liveness probe answers without any session
    with urllib.request.urlopen(console_world.url("/healthz"), timeout=10) as response:  # noqa: S310
        assert response.status == 200 and response.read() == b"ok\n"
