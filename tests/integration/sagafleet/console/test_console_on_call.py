"""The on-call queue on a real fleet (PostgreSQL): a line says who asks, what, how much, why
and how long is left; filters, search, order and keyset paging; one form that approves or
denies; four eyes drawn honestly; claims recorded and shared; bulk answers bound to the
version shown; a saga's history exported with its chain verdict, for its tenant only."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from console_support import CARD, csrf_of, sign_in, start_waiting_capture
from principal_support import token_for
from read_model_support import project_all
from starlette.testclient import TestClient

from saga_core.access.roles import PrincipalKind
from saga_core.engine.events import ApprovalDenied, ApprovalGranted
from sagafleet.console.claims import ClaimStore, RequestKey
from sagafleet.console.core import Console
from sagafleet.console.pages.queue_query import (
    QueueQuery,
    QueueSort,
    queue_counts,
    queue_page_rows,
)

pytestmark = pytest.mark.integration

VERSION = re.compile(r'name="seen_version" value="(\d+)"')


def _line(page: str, saga_id: str) -> str:
    """The queue line of ``saga_id`` as the page drew it (up to its evidence)."""
    start = page.index(f'data-saga="{saga_id}"')
    return page[start:page.index('<details class="evidence"', start)]


def _answers(fleet, saga_id: str) -> list[object]:
    return [e for e in fleet.repo.load_history(saga_id).events
            if isinstance(e, ApprovalGranted | ApprovalDenied)]


def _version(line: str) -> str:
    found = VERSION.search(line)
    assert found is not None, line
    return found.group(1)


def test_a_line_says_who_asks_what_how_much_why_and_how_long_is_left(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    # given a capture of 2,500.00 EUR (in cents) waiting for an approver, started by an agent
    saga_id = start_waiting_capture(fleet, key="line-1")
    project_all(console.read)
    signed_in("olivia", ("approver", "operator"))
    # when the approver opens the queue
    page = browser.get("/queue").text
    line = _line(page, saga_id)
    # then the line reads as the decision: who, what, how much, why, time left, the answers
    assert "bot-default (agent)" in line
    assert "console_capture v1" in line and "capture_payment" in line
    assert "€2,500.00" in line
    assert "amount is above €1,000.00" in line  # the gate's own reason, in the currency
    assert "approval policy applies" not in line.split('class="why"')[1].split("</span>")[0]
    assert re.search(r'<time class="countdown[^"]*" datetime="[^"]+"[^>]*>\d+ (min|h)', line)
    assert 'action="/actions/decide"' in line and 'value="approve"' in line
    assert 'value="deny"' in line
    # and the evidence one click away holds the saga's context, its input masked
    assert "the customer confirmed the quote" in page  # the start's reason
    assert CARD not in page
    # and the counts head the list
    assert "1 approval</span>" in page


def test_the_one_form_denies_with_the_button_pressed_bound_to_the_version_shown(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    saga_id = start_waiting_capture(fleet, key="line-deny")
    project_all(console.read)
    signed_in("olivia", ("approver", "operator"))
    page = browser.get("/queue").text
    line = _line(page, saga_id)
    fields = {"csrf": csrf_of(page), "saga_id": saga_id, "step": "capture_payment",
              "kind": "forward", "expected_version": _version(line), "return_to": "/queue",
              "reason": "not this quote"}
    # a form without a decision records nothing, and says what it needs
    refused = browser.post("/actions/decide", data=fields)
    assert refused.status_code == 400 and "decision must be approve or deny" in refused.text
    assert _answers(fleet, saga_id) == []
    # when the person presses Deny
    answered = browser.post("/actions/decide", data=fields | {"decision": "deny"},
                            follow_redirects=False)
    # then the denial is recorded with its reason
    assert answered.status_code == 303
    [denial] = _answers(fleet, saga_id)
    assert isinstance(denial, ApprovalDenied) and denial.reason == "not this quote"


def test_the_starter_is_shown_no_approve_under_four_eyes_and_is_told_why(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    # given a capture started by a person who is also an approver
    start_waiting_capture(fleet, key="four-eyes-setup")  # registers the definition
    token = token_for(fleet, "stella", ("agent", "approver"))
    stella = fleet.client_for(fleet.authenticate(token))
    saga_id = stella.start("console_capture", {
        "amount": 250_000, "currency": "EUR", "note": "mine",
        "card_token": stella.put_secret(CARD).as_input()}, key="four-eyes").saga_id
    project_all(console.read)
    # when she opens the queue
    browser.cookies.clear()
    sign_in(browser, token)
    line = _line(browser.get("/queue").text, saga_id)
    # then her own request offers Deny but no Approve, and says why
    assert 'value="approve"' not in line and 'value="deny"' in line
    assert "You started this saga: four eyes asks another approver" in line
    # and a colleague sees Approve on it
    signed_in("olivia", ("approver",))
    assert 'value="approve"' in _line(browser.get("/queue").text, saga_id)


def test_an_agent_is_told_it_cannot_answer_and_sees_no_buttons(
        fleet, console: Console, browser: TestClient) -> None:
    saga_id = start_waiting_capture(fleet, key="agent-looks")
    project_all(console.read)
    sign_in(browser, token_for(fleet, "planner", ("agent", "approver"),
                               kind=PrincipalKind.AGENT))
    page = browser.get("/queue").text
    assert "signed in as an agent" in page and "only a person answers" in page
    assert 'action="/actions/decide"' not in _line(page, saga_id)
    assert 'id="bulk"' not in page


def test_filters_search_order_and_keyset_paging_read_the_queue_in_sql(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    # given three requests waiting
    ids = [start_waiting_capture(fleet, key=f"page-{n}", note=f"order {n}") for n in range(3)]
    project_all(console.read)
    now = datetime.now(UTC)
    # when the queue is read a page of one at a time
    seen, query = [], QueueQuery(sort=QueueSort.OLDEST)
    while True:
        rows, after = queue_page_rows(console.read, query, tenant="default", now=now, limit=1)
        seen += [row.saga_id for row in rows]
        if after is None:
            break
        query = QueueQuery(sort=QueueSort.OLDEST, after=after)
    # then every request comes exactly once, oldest first, and "newest" is the reverse
    ours = [saga_id for saga_id in seen if saga_id in ids]
    assert ours == ids and len(seen) == len(set(seen))
    newest, _ = queue_page_rows(console.read, QueueQuery(sort=QueueSort.NEWEST),
                                tenant="default", now=now)
    assert [r.saga_id for r in newest if r.saga_id in ids] == ids[::-1]
    # and a search finds one saga; filters narrow by gate, definition and age
    found, _ = queue_page_rows(console.read, QueueQuery(search=ids[1]), tenant="default",
                               now=now)
    assert [r.saga_id for r in found] == [ids[1]]
    assert not queue_page_rows(console.read, QueueQuery(gate="treasurer"), tenant="default",
                               now=now)[0]
    assert not queue_page_rows(console.read, QueueQuery(definition="trip"),
                               tenant="default", now=now)[0]
    assert queue_counts(console.read, QueueQuery(), tenant="default", now=now).approvals >= 3
    # and the page applies them; a bad value is a 400 naming the parameter
    signed_in("olivia", ("approver",))
    page = browser.get("/queue", params={"q": ids[2]}).text
    assert ids[2] in page and ids[0] not in page and "1 match the filters" in page
    bad = browser.get("/queue", params={"sort": "loudest"})
    assert bad.status_code == 400 and "sort is one of urgent, oldest, newest" in bad.text
    assert browser.get("/queue/fragment", params={"age": "soon"}).status_code == 400


def test_a_claim_is_shared_recorded_taken_over_and_released(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    saga_id = start_waiting_capture(fleet, key="claimed")
    project_all(console.read)
    claim = {"saga_id": saga_id, "entry": "approval", "step": "capture_payment",
             "kind": "forward"}
    # when olivia says she is on it
    signed_in("olivia", ("approver",))
    page = browser.get("/queue").text
    browser.post("/queue/claim", data=claim | {"csrf": csrf_of(page), "claim": "claim"})
    assert "You are on it since" in _line(browser.get("/queue").text, saga_id)
    # then a colleague sees who is on it, and may take it over
    signed_in("paula", ("approver",))
    page = browser.get("/queue").text
    line = _line(page, saga_id)
    assert "olivia is on it since" in line and "Take over" in line
    browser.post("/queue/claim", data=claim | {"csrf": csrf_of(page), "claim": "claim"})
    page = browser.get("/queue").text
    browser.post("/queue/claim", data=claim | {"csrf": csrf_of(page), "claim": "release"})
    # and the record says who claimed, when, and how each claim ended
    key = RequestKey(saga_id, "approval", "capture_payment", "forward")
    history = ClaimStore(fleet.store).history("default", key)
    assert [(c.claimed_by, c.ending, c.ended_by) for c in history] == [
        ("olivia", "taken_over", "paula"), ("paula", "released", "paula")]
    # and another tenant cannot claim (nor see) the request
    signed_in("gustav", ("approver",), tenant="globex")
    page = browser.get("/queue").text
    foreign = browser.post("/queue/claim", data=claim | {"csrf": csrf_of(page),
                                                         "claim": "claim"})
    assert foreign.status_code == 400 and "no such request" in foreign.text
    assert len(ClaimStore(fleet.store).history("default", key)) == 2
    assert ClaimStore(fleet.store).history("globex", key) == []
    # and an auditor claims nothing
    signed_in("aude", ("auditor",))
    page = browser.get("/queue").text
    assert "I'm on it" not in page
    assert browser.post("/queue/claim", data=claim | {"csrf": csrf_of(page),
                                                      "claim": "claim"}).status_code == 403


def test_bulk_answers_each_request_bound_to_its_version_and_reports_each(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    # given two requests waiting, and a third whose saga moved since the page was drawn
    ids = [start_waiting_capture(fleet, key=f"bulk-{n}") for n in range(3)]
    project_all(console.read)
    signed_in("olivia", ("approver",))
    page = browser.get("/queue").text
    values = {saga_id: re.search(r'name="item" value="([^"]+)"', _line(page, saga_id))
              for saga_id in ids}
    assert all(values.values())
    items = [values[saga_id].group(1) for saga_id in ids]  # type: ignore[union-attr]
    moved = items[2].split("|")
    items[2] = "|".join([*moved[:3], str(int(moved[3]) - 1), moved[4]])
    # when she approves the three at once with one reason
    answered = browser.post("/actions/bulk", data={
        "csrf": csrf_of(page), "decision": "approve", "reason": "batch checked",
        "item": items})
    # then each is answered or refused on its own, and the page says which
    assert answered.status_code == 200
    assert "Bulk approve: 2 of 3 recorded" in answered.text
    assert answered.text.count("not recorded:") == 1
    for saga_id in ids[:2]:
        [grant] = _answers(fleet, saga_id)
        assert isinstance(grant, ApprovalGranted) and grant.reason == "batch checked"
        assert grant.approver == "olivia"
    assert _answers(fleet, ids[2]) == []
    # and nothing selected is a 400 saying so
    empty = browser.post("/actions/bulk", data={"csrf": csrf_of(page), "decision": "deny",
                                                "reason": "x"})
    assert empty.status_code == 400 and "select at least one request" in empty.text


def test_a_sagas_history_exports_as_json_with_its_chain_verdict_for_its_tenant_only(
        fleet, console: Console, browser: TestClient, signed_in) -> None:
    saga_id = start_waiting_capture(fleet, key="exported")
    project_all(console.read)
    signed_in("olivia", ("approver",))
    page = browser.get(f"/sagas/{saga_id}").text
    # the saga page leads with who asked and why, and draws the step runs
    assert 'id="context"' in page and "bot-default (agent)" in page
    assert 'id="gantt"' in page and f"/sagas/{saga_id}/export.json" in page
    exported = browser.get(f"/sagas/{saga_id}/export.json")
    assert exported.status_code == 200
    assert "attachment" in exported.headers["content-disposition"]
    document = json.loads(exported.text)
    assert document["saga_id"] == saga_id and document["tenant"] == "default"
    assert document["chain"]["verdict"] == "intact" and document["chain"]["chain_ok"]
    assert [e["type"] for e in document["events"]][0] == "SagaStarted"
    assert document["events_total"] == len(document["events"])
    assert CARD not in exported.text  # masked as on the page
    signed_in("gustav", ("approver",), tenant="globex")
    assert browser.get(f"/sagas/{saga_id}/export.json").status_code == 404


def test_the_favicon_is_served(browser: TestClient) -> None:
    icon = browser.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")
