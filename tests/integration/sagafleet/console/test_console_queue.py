"""The queue page: a waiting saga's evidence, and the typed actions bound to what was shown."""

from __future__ import annotations

import re

import pytest
from console_support import CARD, csrf_of, events_of, start_waiting_capture
from read_model_support import project_all
from starlette.testclient import TestClient

from saga_core.engine.events import ApprovalGranted
from sagafleet.console.core import Console

pytestmark = pytest.mark.integration

VERSION = re.compile(r'name="seen_version" value="(\d+)"')


def _approve_form(page: str, saga_id: str) -> dict[str, str]:
    """The approve form's fields for ``saga_id`` as the page drew them."""
    card = page[page.index(f'data-saga="{saga_id}"'):]
    form = card[card.index('action="/actions/approve"'):]
    form = form[:form.index("</form>")]
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form))


def test_the_queue_shows_a_waiting_capture_with_its_evidence(fleet, console: Console,
                                                             browser: TestClient,
                                                             signed_in) -> None:
    # given a capture that waits for an approver, and the read model caught up
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    signed_in("olivia", ("approver", "operator"))
    # when the approver opens the queue
    page = browser.get("/queue").text
    # then the entry shows saga, step, action, masked arguments, gate, effects and expiry
    assert f'data-saga="{saga_id}"' in page
    assert "capture_payment" in page and "payments.capture@1" in page
    assert CARD not in page  # the card token is a secret input: masked
    assert "on approve" in page and "on deny" in page and "compensates" in page
    assert "role <span class=\"badge role\">approver</span>" in page
    assert "payments.capture of the quoted amount" in page  # the approval's scope
    assert "Captures over 1000.00 need a person" in page  # the step's business rule
    assert 'action="/actions/approve"' in page and 'action="/actions/deny"' in page
    assert VERSION.search(page)


def test_approving_twice_records_one_grant(fleet, console: Console, browser: TestClient,
                                           signed_in) -> None:
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    signed_in("olivia", ("approver",))
    fields = _approve_form(browser.get("/queue").text, saga_id)
    fields |= {"reason": "quote confirmed by phone"}
    # when the same form is posted twice (a double click)
    first = browser.post("/actions/approve", data=fields)
    second = browser.post("/actions/approve", data=fields)
    # then both answer with the queue, and the log holds one grant, naming the approver
    assert first.status_code == second.status_code == 303, second.text
    grants = [e for e in fleet.repo.load_history(saga_id).events
              if isinstance(e, ApprovalGranted)]
    assert len(grants) == 1
    assert grants[0].approver == "olivia" and grants[0].reason == "quote confirmed by phone"


def test_an_action_on_a_saga_that_moved_since_it_was_shown_is_refused(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    signed_in("olivia", ("approver", "operator"))
    fields = _approve_form(browser.get("/queue").text, saga_id) | {"reason": "fine"}
    # when the saga moves on meanwhile (its agent asks to cancel it)
    fleet.client(tenant="default", actor="bot-default").cancel(saga_id, reason="changed mind")
    before = events_of(fleet, saga_id)
    response = browser.post("/actions/approve", data=fields)
    # then nothing is recorded, and the answer says so and shows the saga as it is now
    assert response.status_code == 409
    assert "changed since it was shown" in response.text
    assert "now</h2>" in response.text
    assert "<dt>cancel</dt><dd>requested</dd>" in response.text
    assert events_of(fleet, saga_id) == before


def test_inputs_full_of_html_render_inert(fleet, console: Console, browser: TestClient,
                                          signed_in) -> None:
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    saga_id = start_waiting_capture(fleet, note=hostile, key="hostile")
    project_all(console.read)
    signed_in("olivia", ("approver",))
    page = browser.get("/queue").text
    assert f'data-saga="{saga_id}"' in page
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    # and a reason full of HTML comes back escaped too, on the saga's refused-action page
    fields = _approve_form(page, saga_id) | {"reason": "<b>ok</b>", "up_to": "-5"}
    refused = browser.post("/actions/approve", data=fields)
    assert refused.status_code == 400 and "<b>" not in refused.text
    assert csrf_of(refused.text)
