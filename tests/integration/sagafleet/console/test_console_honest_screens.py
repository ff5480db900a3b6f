"""Honest screens in the console, on a real fleet: an answer from a page a colleague already
answered is refused (409) naming who answered at which version; a denied step reads denied
on the saga page, its graph and the list after the saga compensated, with no live phase;
a COMPLETED saga's reconciled timeout is shown recovered, not as a live error."""

from __future__ import annotations

import re

import pytest
from console_support import events_of, start_waiting_capture
from fleet_harness import drive
from principal_support import person
from read_model_support import project_all
from starlette.testclient import TestClient
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import ApprovalGranted
from sagafleet.console.core import Console
from sagafleet.sandbox.faults import Boundary

pytestmark = pytest.mark.integration


def _form(page: str, saga_id: str, action: str) -> dict[str, str]:
    """The fields of the ``action`` form (approve, deny) for ``saga_id`` as the page drew it."""
    card = page[page.index(f'data-saga="{saga_id}"'):]
    form = card[card.index(f'action="/actions/{action}"'):]
    form = form[:form.index("</form>")]
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form))


def _answered_at(fleet, saga_id: str) -> int:
    """The stream version of the saga's grant, read from its log."""
    events = fleet.repo.load_history(saga_id).events
    return 1 + next(i for i, e in enumerate(events) if isinstance(e, ApprovalGranted))


def test_an_answer_from_a_page_a_colleague_already_answered_is_refused_naming_who_and_when(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    # given a capture waiting for an approver, on bea's queue page
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    signed_in("bea", ("approver",))
    page = browser.get("/queue").text
    approve = _form(page, saga_id, "approve") | {"reason": "quote confirmed"}
    deny = _form(page, saga_id, "deny") | {"reason": "too much"}
    # when olivia approves it first, from the same version of the saga
    person(fleet, "olivia").approve(saga_id, "capture_payment",
                                    seen_version=int(approve["seen_version"]))
    answered = _answered_at(fleet, saga_id)
    before = events_of(fleet, saga_id)
    # then bea's approval records nothing and is told who approved, at which version
    response = browser.post("/actions/approve", data=approve)
    assert response.status_code == 409, response.text
    assert "Changed meanwhile" in response.text
    assert f"already approved by olivia at version {answered}" in response.text
    assert f"<td>olivia at version {answered}</td>" in response.text  # the saga as it is
    # and so is her denial from the same page
    response = browser.post("/actions/deny", data=deny)
    assert response.status_code == 409, response.text
    assert f"already approved by olivia at version {answered}" in response.text
    assert events_of(fleet, saga_id) == before


def test_a_denied_capture_reads_denied_on_every_page_after_the_saga_compensated(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    # given a capture bob denied, and the saga finished after it
    saga_id = start_waiting_capture(fleet, key="denied-1")
    person(fleet, "bob").deny(saga_id, "capture_payment", reason="not this quote")
    fleet.orchestrator.advance(saga_id)
    state = fleet.repo.load(saga_id).state
    assert state.status is SagaStatus.COMPENSATED
    assert state.run("capture_payment", StepKind.FORWARD).status == "denied"
    project_all(console.read)
    signed_in("olivia", ("approver", "operator"))
    # when the saga's page is opened
    page = browser.get(f"/sagas/{saga_id}").text
    # then the graph and the step table say denied, never awaiting approval
    assert ('data-step="capture_payment" data-kind="forward" data-state="denied"') in page
    assert '<span class="state st-denied">denied</span>' in page
    assert "awaiting_approval" not in page
    # and the finished saga runs no phase
    assert "<dt>Phase</dt><dd>finished</dd>" in page
    # and the list shows it finished with nothing current, and the queue holds nothing of it
    listing = browser.get("/sagas").text
    row = listing[listing.index(f'<tr data-saga="{saga_id}"'):]
    row = row[:row.index("</tr>")]
    assert "COMPENSATED" in row and "awaiting_approval" not in row
    assert f'data-saga="{saga_id}"' not in browser.get("/queue").text


def test_a_completed_sagas_reconciled_timeout_is_shown_recovered(
        fleet, faults, console: Console, browser: TestClient, signed_in) -> None:
    # given a trip whose flight hold committed and then timed out, found by its lookup
    faults.add("flights", "hold", Boundary.COMMIT_THEN_TIMEOUT, count=1)
    recovered = fleet.client().start("trip", TRIP_INPUT, key="recovered-1").saga_id
    assert drive(fleet, recovered) is SagaStatus.COMPLETED
    # and a trip whose hotel refused: an error nothing recovered from
    faults.add("hotels", "hold", Boundary.BUSINESS_REJECTION, count=1)
    refused = fleet.client().start("trip", TRIP_INPUT | {"nights": 3},
                                   key="refused-1").saga_id
    assert drive(fleet, refused) is SagaStatus.COMPENSATED
    project_all(console.read)
    signed_in("olivia", ("approver", "operator"))
    # when their pages are opened
    page = browser.get(f"/sagas/{recovered}").text
    # then the completed saga's timeout is marked recovered, not shown as a live error
    header = page[page.index("<dt>Last error</dt>"):]
    header = header[:header.index("</dd>")]
    assert '<span class="recovered"' in header and "outcome unknown" in header
    assert 'class="error"' not in header
    other = browser.get(f"/sagas/{refused}").text
    header = other[other.index("<dt>Last error</dt>"):]
    assert header[:header.index("</dd>")].count('<span class="error">') == 1
    # and the list says the same of each
    listing = browser.get("/sagas").text
    assert re.search(rf'<tr data-saga="{recovered}".*?<td class="last-error">'
                     r'<span class="recovered"', listing, re.S)
    assert re.search(rf'<tr data-saga="{refused}".*?<td class="last-error">'
                     r'<span class="error">', listing, re.S)
