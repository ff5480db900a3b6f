"""The operator's day in a real browser, on a real fleet: sign in with a token, see a capture
that needs approval appear live, read its evidence, approve it with a reason, watch the saga
complete; the wrong hands are refused (no approver role, another tenant, an auditor); a
second approval records nothing; a saga full of HTML and script renders inert; sign-out ends
the session.
"""

from __future__ import annotations

import time

from browser_support import no_alert, post_form, refused, sign_in, sign_out, wait_until
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from saga_core.engine.events import ApprovalDenied, ApprovalGranted

GATED = TRIP_INPUT | {"amount": 250_000}  # above the trip's 1000.00 capture limit


def _card(saga_id: str) -> str:
    return f"article.queue-item[data-saga='{saga_id}']"


def _waiting_for_approval(fleet, saga_id: str, timeout: float = 60.0) -> int:
    """The saga's version once it waits for its capture's approval."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loaded = fleet.repo.load(saga_id)
        if fleet.client().status(saga_id).pending_approvals:
            return loaded.version
        time.sleep(0.1)
    raise AssertionError(f"saga {saga_id} never asked for an approval")


def _made_by_the_input(driver) -> list[object]:
    """Elements the hostile input would have made, had it been taken as markup."""
    return (driver.find_elements(By.CSS_SELECTOR, "main img, main script")
            + [b for b in driver.find_elements(By.CSS_SELECTOR, "main b")
               if _text_unless_replaced(b) == "bold"])


def _text_unless_replaced(element) -> str | None:
    """An element's text, or None when a live refresh replaced it since it was found (the
    replacement is then checked by the next look)."""
    try:
        return str(element.text)
    except StaleElementReferenceException:
        return None


def _answers(fleet, saga_id: str) -> list[object]:
    return [e for e in fleet.repo.load_history(saga_id).events
            if isinstance(e, ApprovalGranted | ApprovalDenied)]


def test_an_approver_sees_an_approval_arrive_live_approves_it_once_and_the_saga_completes(
    console_world, browser, screenshot
):
    fleet = console_world.fleet
    # given an approver signed in with its token, looking at the queue
    browser.delete_all_cookies()
    browser.get(console_world.url("/sign-in"))
    screenshot(browser, "sign-in")
    sign_in(browser, console_world, "ana")
    session = browser.get_cookie("sagafleet_session")
    assert session["httpOnly"] is True and session["sameSite"] == "Strict"
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".live-status.on"))
    browser.execute_script("window.sagafleetNoReload = 'still the same page';")

    # when an agent starts a trip whose capture is above the approval limit
    saga_id = fleet.client().start("trip", GATED, key="console-approve").saga_id

    # then the request appears without a reload (the live event stream fetched it)
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, _card(saga_id)))
    assert browser.execute_script("return window.sagafleetNoReload") == "still the same page"
    # with its evidence one click away: the action, the arguments (the card token masked),
    # the gate's role (an opened evidence stays open while the list refreshes around it)
    wait_until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f"{_card(saga_id)} details.evidence > summary").click() or True)
    evidence = wait_until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f"{_card(saga_id)} details.evidence > dl:not(.context)").text)
    assert "payments.capture" in evidence and "250000" in evidence
    assert "on approve" in evidence and "on deny" in evidence
    assert "tok_visa_4242" not in wait_until(
        browser, lambda d: d.find_element(By.ID, "queue").text)
    assert "approver" in wait_until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f"{_card(saga_id)} .badge.role").text)
    screenshot(browser, "queue-pending", whole_page=True)  # docs/console-queue.png is one
    screenshot(browser, "queue-evidence", element=_card(saga_id))

    # and the saga's own page, open in a second tab, shows it running, live
    queue_tab = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.get(console_world.url(f"/sagas/{saga_id}"))
    state = wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, "h1 .state").text)
    assert state != "COMPLETED"
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".live-status.on"))
    browser.execute_script("window.sagafleetNoReload = 'the saga tab';")
    screenshot(browser, "saga-waiting", whole_page=True)
    saga_tab = browser.current_window_handle
    browser.switch_to.window(queue_tab)

    # when the approver approves it with a reason, clicking twice
    version_seen = fleet.repo.load(saga_id).version
    reason = wait_until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f"{_card(saga_id)} form.approve input[name=reason]"))
    reason.send_keys("customer confirmed by phone")  # focus inside: no refresh replaces it
    button = browser.find_element(By.CSS_SELECTOR, f"{_card(saga_id)} form.approve button")
    button.click()
    try:
        browser.execute_script("arguments[0].click();", button)  # the second click, at once
    except WebDriverException:  # stale, or "node does not belong to the document"
        pass  # the first click's answer already replaced the page
    notice = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice.ok"))[0]
    assert notice.text.startswith("Approved saga")
    screenshot(browser, "queue-approved")
    # and once more, the same form posted again after the page has moved on
    post_form(browser, "/actions/approve", {
        "saga_id": saga_id, "step": "capture_payment", "kind": "forward",
        "expected_version": str(version_seen), "reason": "customer confirmed by phone",
        "return_to": "/queue"})
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.notice"))
    screenshot(browser, "queue-approved-again")

    # then the log holds exactly one grant, by the approver, with its reason
    grants = _answers(fleet, saga_id)
    assert len(grants) == 1 and isinstance(grants[0], ApprovalGranted), grants
    # and the saga completes, which its page (not reloaded) shows as it happens
    browser.switch_to.window(saga_tab)
    wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, "h1 .state").text
               == "COMPLETED", timeout=90)
    assert browser.execute_script("return window.sagafleetNoReload") == "the saga tab"
    assert fleet.repo.load(saga_id).state.status is SagaStatus.COMPLETED
    screenshot(browser, "saga-completed", whole_page=True)
    browser.close()
    browser.switch_to.window(queue_tab)
    # and the queue no longer holds its request (once the read models have it)
    browser.get(console_world.url("/queue"))
    wait_until(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, _card(saga_id)))


def test_the_wrong_hands_are_refused_and_an_auditor_sees_without_acting(
    console_world, browser, screenshot
):
    fleet = console_world.fleet
    # given a trip waiting for its capture's approval
    saga_id = fleet.client().start("trip", GATED | {"nights": 4}, key="console-refused").saga_id
    version = _waiting_for_approval(fleet, saga_id)
    approve = {"saga_id": saga_id, "step": "capture_payment", "kind": "forward",
               "expected_version": str(version), "reason": "let me", "return_to": "/queue"}

    # when an operator without the approver role looks at the queue
    sign_in(browser, console_world, "otto")
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, _card(saga_id)))
    # then the request is there but offers no approval; posted anyway, it is refused
    assert not browser.find_elements(By.CSS_SELECTOR, f"{_card(saga_id)} form.approve")
    post_form(browser, "/actions/approve", approve)
    refused(browser, saying="approver")
    screenshot(browser, "refused-no-role")
    sign_out(browser)

    # when another tenant's approver signs in
    sign_in(browser, console_world, "gina")
    # then the saga is nowhere in its world, and approving it is refused as not found
    assert not browser.find_elements(By.CSS_SELECTOR, _card(saga_id))
    browser.get(console_world.url(f"/sagas/{saga_id}"))
    assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text
    post_form(browser, "/actions/approve", approve)
    refused(browser, saying=f"no saga {saga_id!r}")
    screenshot(browser, "refused-other-tenant")
    sign_out(browser)

    # when an auditor signs in
    sign_in(browser, console_world, "aude")
    text = wait_until(browser, lambda d: d.find_element(By.CSS_SELECTOR, _card(saga_id)).text)
    # then it sees the request and its evidence, is told it is read-only, and has no action
    assert "payments.capture" in text
    assert not browser.find_elements(By.CSS_SELECTOR, "#queue form")
    assert "Read-only" in browser.find_element(By.CSS_SELECTOR, "p.notice").text
    screenshot(browser, "queue-auditor")
    post_form(browser, "/actions/approve", approve)
    refused(browser, saying="approver")
    sign_out(browser)

    # and nothing was recorded: the saga still waits, unanswered
    assert _answers(fleet, saga_id) == []
    assert fleet.client().status(saga_id).pending_approvals


def test_a_saga_full_of_html_and_script_renders_as_inert_text(
    console_world, browser, screenshot
):
    fleet = console_world.fleet
    script = "<script>alert(1)</script>"
    image = "<img src=x onerror=alert(2)>"
    sign_in(browser, console_world, "ana")
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".live-status.on"))

    # when a saga whose inputs hold a script and an image with a handler waits for approval
    hostile = GATED | {"flight_id": script, "hotel_id": image,
                       "customer_email": "ada+<b>bold</b>@example.com"}
    saga_id = fleet.client().start("trip", hostile, key="console-hostile").saga_id

    # then it arrives live, and later on a fresh page, as text: no alert, no element made
    def shown_inert() -> None:
        # (textContent: the evidence folded in the line's <details> counts too)
        text = wait_until(browser, lambda d: d.find_element(
            By.CSS_SELECTOR, _card(saga_id)).get_attribute("textContent"))
        assert no_alert(browser)
        assert script in text and image in text
        assert not _made_by_the_input(browser)
        inline = browser.execute_script("return document.querySelectorAll('script:not([src])')"
                                        ".length")
        assert inline == 0

    shown_inert()
    screenshot(browser, "queue-hostile-live", element=_card(saga_id))
    browser.refresh()
    shown_inert()
    # and on the saga's own page
    browser.get(console_world.url(f"/sagas/{saga_id}"))
    wait_until(browser, lambda d: saga_id in d.find_element(By.TAG_NAME, "main").text)
    assert no_alert(browser)
    assert script in browser.find_element(By.TAG_NAME, "main").text
    assert not _made_by_the_input(browser)
    screenshot(browser, "saga-hostile", whole_page=True)
    # and in the list of sagas
    browser.get(console_world.url("/sagas"))
    wait_until(browser, lambda d: saga_id in d.find_element(By.TAG_NAME, "main").text)
    assert no_alert(browser) and not _made_by_the_input(browser)
    screenshot(browser, "sagas")


def test_sign_out_ends_the_session_for_good(console_world, browser, screenshot):
    # given a signed-in approver
    sign_in(browser, console_world, "ana")
    cookie = browser.get_cookie("sagafleet_session")
    # when it signs out
    sign_out(browser)
    screenshot(browser, "signed-out")
    # then the pages ask to sign in again, even with the old session cookie put back
    browser.get(console_world.url("/queue"))
    assert "/sign-in" in browser.current_url
    browser.add_cookie({"name": cookie["name"], "value": cookie["value"], "path": "/"})
    browser.get(console_world.url("/queue"))
    assert "/sign-in" in browser.current_url
    assert browser.find_elements(By.ID, "token")
