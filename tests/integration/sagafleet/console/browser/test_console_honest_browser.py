"""Two approvers with the same request open in a real browser, on a real fleet: the first
approves; the second, whose page still shows the old version, clicks Approve and is told that
nothing was recorded, who approved and at which version. A capture denied from the queue
reads denied on its saga page once the saga compensated, what it never reached reads "not
run", and the finished saga runs no phase.
"""

from __future__ import annotations

import time

from browser_support import sign_in, wait_until
from principal_support import token_for
from selenium.webdriver.common.by import By
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from saga_core.engine.events import ApprovalDenied, ApprovalGranted

GATED = TRIP_INPUT | {"amount": 250_000}  # above the trip's 1000.00 capture limit


def _card(saga_id: str) -> str:
    return f"article.queue-item[data-saga='{saga_id}']"


def _answers(fleet, saga_id: str) -> list[tuple[int, object]]:
    events = fleet.repo.load_history(saga_id).events
    return [(n, e) for n, e in enumerate(events, start=1)
            if isinstance(e, ApprovalGranted | ApprovalDenied)]


def _settled(fleet, saga_id: str, timeout: float = 90.0) -> SagaStatus:
    """The saga's status once it is terminal (the fleet's workers and sweeper run it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = fleet.repo.load(saga_id).state.status
        if status.is_terminal:
            return status
        time.sleep(0.1)
    raise AssertionError(f"saga {saga_id} never finished")


def _type(browser, selector: str, text: str) -> None:
    """Type into the field ``selector`` names, looked up again if a live refresh replaced it
    before the keys arrived; once focus is inside, no refresh replaces its form."""
    wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, selector).send_keys(text)
               or True)


def _state_in_table(browser, step_id: str) -> str:
    """The state the steps table shows for a step's forward operation."""
    return str(wait_until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f"#step-{step_id}-forward .state").text))


def test_the_second_approver_on_a_stale_page_is_told_who_approved_and_at_which_version(
    console_world, browser, screenshot
):
    fleet = console_world.fleet
    console_world.tokens["bea"] = token_for(fleet, "bea", ("approver",))
    # given bea looking at a capture that waits for an approver
    saga_id = fleet.client().start("trip", GATED, key="honest-stale").saga_id
    sign_in(browser, console_world, "bea")
    _type(browser, f"{_card(saga_id)} form.approve input[name=reason]", "looks right")
    seen = int(browser.find_element(
        By.CSS_SELECTOR, f"{_card(saga_id)} form.approve input[name=seen_version]")
        .get_attribute("value"))
    # when ana approves it first, from the version bea's page shows
    ana = fleet.client_for(fleet.authenticate(console_world.tokens["ana"]))
    ana.approve(saga_id, "capture_payment", seen_version=seen)
    [(answered, grant)] = _answers(fleet, saga_id)
    assert grant.approver == "ana"
    # and bea clicks Approve on her page
    browser.find_element(By.CSS_SELECTOR, f"{_card(saga_id)} form.approve button").click()
    # then she is told the saga changed, who approved it and at which version
    wait_until(browser, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Changed meanwhile")
    notice = browser.find_element(By.CSS_SELECTOR, "p.notice.error").text
    assert f"already approved by ana at version {answered}" in notice, notice
    assert "nothing was recorded" in notice
    screenshot(browser, "stale-approval-refused", whole_page=True)
    # and her click recorded nothing: the one grant is ana's
    assert len(_answers(fleet, saga_id)) == 1


def test_a_capture_denied_from_the_queue_reads_denied_after_the_saga_compensated(
    console_world, browser, screenshot
):
    fleet = console_world.fleet
    # given ana looking at a capture that waits for her
    saga_id = fleet.client().start("trip", GATED | {"nights": 5}, key="honest-deny").saga_id
    sign_in(browser, console_world, "ana")
    # when she denies it
    # (the queue line's one form: its Deny button answers no)
    _type(browser, f"{_card(saga_id)} form.decide input[name=reason]", "not this trip")
    browser.find_element(By.CSS_SELECTOR,
                         f"{_card(saga_id)} form.decide button[value=deny]").click()
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))
    # then once the holds are undone, the saga's page says denied, in its graph and its table
    assert _settled(fleet, saga_id) is SagaStatus.COMPENSATED
    browser.get(console_world.url(f"/sagas/{saga_id}"))
    wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, "h1 .state").text
               == "COMPENSATED")
    # (each look is taken afresh: the live page may replace its fragment meanwhile)
    assert wait_until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, "g.node[data-step='capture_payment'][data-kind='forward']")
        .get_attribute("data-state")) == "denied"
    assert _state_in_table(browser, "capture_payment") == "denied"
    assert "awaiting_approval" not in wait_until(
        browser, lambda d: d.find_element(By.ID, "saga-live").text)
    # and what it never reached is "not run" in the table as in the graph, not "pending"
    assert _state_in_table(browser, "send_itinerary") == "not run"
    # and the finished saga runs no phase
    facts = wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, "dl.facts").text)
    assert "Phase\nfinished" in facts or "Phase finished" in facts, facts
    screenshot(browser, "saga-denied", whole_page=True)
