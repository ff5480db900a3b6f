"""Deny, cancel and resolve from the queue page: each records one typed event as the signed-in
operator, and a repeated click records nothing more."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from console_support import events_of, start_waiting_capture
from read_model_support import project_all

from application.orchestrator import Orchestrator, utc_now
from saga_core.contracts import SagaStatus
from saga_core.engine.events import ApprovalDenied, CancelRequested, OperatorAction

pytestmark = pytest.mark.integration


def _fields(page: str, saga_id: str, action: str) -> dict[str, str]:
    card = page[page.index(f'data-saga="{saga_id}"'):]
    form = card[card.index(f'action="/actions/{action}"'):]
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form[:form.index("</form>")]))


def _escalated(fleet, saga_id: str) -> None:
    """Let the approval request expire unanswered: with one request allowed, the saga pauses
    for an operator (an orchestrator whose clock is past the request's expiry advances it)."""
    later = Orchestrator(fleet.repo, lambda: utc_now() + timedelta(hours=2),
                         queue_wait=fleet.orchestrator.queue_wait)
    later.advance(saga_id)
    assert fleet.repo.load(saga_id).state.status is SagaStatus.MANUAL_INTERVENTION


def test_an_operator_resolves_a_paused_saga_once(fleet, console, browser, signed_in) -> None:
    saga_id = start_waiting_capture(fleet)
    _escalated(fleet, saga_id)
    project_all(console.read)
    signed_in("oscar", ("operator",))
    page = browser.get("/queue").text
    assert 'data-entry="manual_intervention"' in page
    options = re.findall(r'<option value="(\w+)"', page)
    assert "skip" in options and "approve" not in options
    assert 'action="/actions/approve"' not in page  # an operator without the approver role
    fields = _fields(page, saga_id, "resolve") | {"action": "skip", "reason": "not needed",
                                                   "checked": "the order was withdrawn"}
    first = browser.post("/actions/resolve", data=fields)
    assert first.status_code == 303 and "done=resolved" in first.headers["location"]
    second = browser.post("/actions/resolve", data=fields)
    assert second.status_code == 303 and "done=unchanged" in second.headers["location"]
    actions = [e for e in fleet.repo.load_history(saga_id).events
               if isinstance(e, OperatorAction)]
    assert len(actions) == 1
    assert (actions[0].action, actions[0].actor) == ("skip", "oscar")
    assert actions[0].evidence == {"checked": "the order was withdrawn"}
    notice = browser.get(second.headers["location"]).text
    assert "Nothing new was recorded" in notice


def test_an_approver_denies_and_the_saga_compensates(fleet, console, browser,
                                                     signed_in) -> None:
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    signed_in("olivia", ("approver",))
    fields = _fields(browser.get("/queue").text, saga_id, "deny") | {"reason": "too much"}
    assert browser.post("/actions/deny", data=fields).status_code == 303
    assert browser.post("/actions/deny", data=fields).status_code == 303
    denials = [e for e in fleet.repo.load_history(saga_id).events
               if isinstance(e, ApprovalDenied)]
    assert len(denials) == 1 and denials[0].reason == "too much"
    assert "CompensationStarted" in events_of(fleet, saga_id)


def test_an_operator_cancels_a_waiting_saga(fleet, console, browser, signed_in) -> None:
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    signed_in("oscar", ("operator",))
    page = browser.get("/queue").text
    fields = _fields(page, saga_id, "cancel") | {"reason": "customer called"}
    missing = browser.post("/actions/cancel", data=fields | {"reason": "  "})
    assert missing.status_code == 400 and "no reason" in missing.text
    assert browser.post("/actions/cancel", data=fields).status_code == 303
    cancels = [e for e in fleet.repo.load_history(saga_id).events
               if isinstance(e, CancelRequested)]
    assert len(cancels) == 1 and cancels[0].actor == "oscar"


def test_an_operator_without_the_gates_role_may_deny_but_not_approve(fleet, console, browser,
                                                                      signed_in) -> None:
    saga_id = start_waiting_capture(fleet)
    project_all(console.read)
    signed_in("oscar", ("operator",))
    page = browser.get("/queue").text
    assert 'action="/actions/approve"' not in page and 'action="/actions/deny"' in page
    fields = _fields(page, saga_id, "deny") | {"reason": "the customer withdrew"}
    assert browser.post("/actions/deny", data=fields).status_code == 303
    denials = [e for e in fleet.repo.load_history(saga_id).events
               if isinstance(e, ApprovalDenied)]
    assert [(d.approver, d.roles) for d in denials] == [("oscar", ["operator"])]
