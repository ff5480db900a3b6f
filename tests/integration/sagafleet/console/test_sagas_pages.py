"""The console's saga list (/sagas) and saga page (/sagas/{id}) on a real fleet's PostgreSQL:
filters, keyset paging that holds still under inserts, one tenant only (another's saga is
404, like a missing one), values from agents and tools escaped, the dependency graph with
every step's state, approvals with who approved, the chain check, replay as of a position.

Sagas are written straight into the log (TripScript, as the projection tests do) and
projected, so each test knows exactly which events exist and when.
"""

from __future__ import annotations

import html
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from read_model_support import project_all
from starlette.testclient import TestClient

from application.client import saga_id_for_key
from events.definition_store.postgres import DefinitionStore
from events.saga_log.postgres import PostgresSagaLog
from saga_core import payload_hash
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import ApprovalGranted
from sagafleet.console.core import Console
from sagafleet.example_sagas import trip_definition

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "projections"))
from projection_support import SECRET_CARD, T0, TripScript  # noqa: E402

pytestmark = pytest.mark.integration

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)><b style="color:red">'
SAGA_ROW = re.compile(r'<tr data-saga="([^"]+)"')
INLINE_STYLE = re.compile(r"<[^>]*\sstyle=")
PAGER_LINK = re.compile(r'<a rel="(next|prev)" href="([^"]+)"')


@pytest.fixture
def repo(console: Console) -> PostgresSagaLog:
    """Appends saga events straight into the console's store; trip and a second
    definition (``trip.express``) registered."""
    console.read.definitions.register_shared(trip_definition())
    console.read.definitions.register_shared(_express())
    return PostgresSagaLog(console.read.store, DefinitionStore(console.read.store))


def _express() -> Any:
    return trip_definition().model_copy(update={"name": "trip.express"})


def _written(console: Console, repo: PostgresSagaLog, *scripts: TripScript) -> None:
    for script in scripts:
        script.write(repo)
    project_all(console.read)


def _at(script: TripScript, when: datetime) -> TripScript:
    script.t = when
    return script


def _listed(page: str) -> list[str]:
    return SAGA_ROW.findall(page)


def _link(page: str, rel: str) -> str | None:
    for found_rel, href in PAGER_LINK.findall(page):
        if found_rel == rel:
            return html.unescape(href)
    return None


# -- the list ------------------------------------------------------------------------------


def test_the_list_shows_only_the_tenants_sagas_newest_first_linking_to_each(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    # given two sagas of tenant default and one of tenant other
    older = _at(TripScript(), T0).completed()
    newer = _at(TripScript(), T0 + timedelta(days=1)).completed()
    foreign = _at(TripScript(tenant="other"), T0 + timedelta(days=2)).completed()
    _written(console, repo, older, newer, foreign)
    signed_in("olivia")

    # when olivia (tenant default) opens the list
    page = browser.get("/sagas")

    # then she sees her tenant's two sagas, newest first, each linking to its page
    assert page.status_code == 200
    assert _listed(page.text) == [newer.saga_id, older.saga_id]
    assert f'href="/sagas/{newer.saga_id}"' in page.text
    assert foreign.saga_id not in page.text


def test_another_tenants_saga_is_not_found_exactly_like_a_missing_one(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    foreign = TripScript(tenant="other").completed()
    _written(console, repo, foreign)
    signed_in("olivia")

    theirs = browser.get(f"/sagas/{foreign.saga_id}")
    missing_id = "00000000-0000-4000-8000-000000000000"
    missing = browser.get(f"/sagas/{missing_id}")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.text.replace(foreign.saga_id, "ID") == missing.text.replace(missing_id, "ID")
    assert "COMPLETED" not in theirs.text and "hold_flight" not in theirs.text
    # nor does replaying it as of a position reveal anything
    assert browser.get(f"/sagas/{foreign.saga_id}?at=1").status_code == 404


def test_filters_by_state_definition_age_stuck_and_search(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    now = datetime.now(UTC)
    completed = _at(TripScript(), T0).completed()
    compensated = _at(TripScript(), T0 + timedelta(days=10)).compensated()
    stuck = _at(TripScript(), T0 + timedelta(days=20)).start().succeed("hold_flight")
    fresh = _at(TripScript(), now - timedelta(seconds=5)).start()  # running, just moved
    express = TripScript(saga_id=saga_id_for_key("default", "order-42"))
    express.definition = _express()
    _at(express, T0 + timedelta(days=30)).completed()
    _written(console, repo, completed, compensated, stuck, fresh, express)
    signed_in("olivia")

    def listed(query: str) -> set[str]:
        page = browser.get("/sagas?" + query)
        assert page.status_code == 200, page.text
        return set(_listed(page.text))

    assert listed("status=COMPLETED") == {completed.saga_id, express.saga_id}
    assert listed("status=COMPENSATED") == {compensated.saga_id}
    assert listed("status=RUNNING") == {stuck.saga_id, fresh.saga_id}
    assert listed("definition=trip.express") == {express.saga_id}
    assert '<option value="trip.express">' in browser.get("/sagas").text  # suggested
    assert listed("definition=trip&status=COMPLETED") == {completed.saga_id}
    # age: started before / after a moment, or older than a duration
    assert listed("started_before=2025-01-15T00:00") == {completed.saga_id, compensated.saga_id}
    assert listed("started_after=2025-01-15T00:00&started_before=2025-02-15T00:00") == {
        stuck.saga_id, express.saga_id}
    assert listed("older_than=1d") == {completed.saga_id, compensated.saga_id, stuck.saga_id,
                                       express.saga_id}
    # stuck: not terminal, no progress for the time given (default 15 minutes)
    assert listed("stuck=1") == {stuck.saga_id}
    rows = browser.get("/sagas?status=RUNNING").text.split("<tr data-saga=")
    marked = {row.split('"')[1] for row in rows[1:] if 'class="badge stuck"' in row}
    assert marked == {stuck.saga_id}  # the list marks the stuck one among the running
    # search: a saga id, or the idempotency key a saga was started with
    assert listed(f"q={compensated.saga_id}") == {compensated.saga_id}
    assert listed("q=order-42") == {express.saga_id}
    assert listed("q=no-such-key") == set()


def test_a_bad_filter_is_refused_naming_the_parameter(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    signed_in("olivia")
    for query, named in (("status=ROLLED_BACK", "status is one of"),
                         ("older_than=soon", "older_than is a number and a unit"),
                         ("started_after=yesterday", "started_after is a date"),
                         ("older=garbage", "older is a page cursor"),
                         ("limit=0", "limit is a page size")):
        page = browser.get("/sagas?" + query)
        assert page.status_code == 400, query
        assert named in html.unescape(page.text), query


def test_keyset_pages_hold_still_when_newer_sagas_arrive(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    # given seven sagas started a day apart
    scripts = [_at(TripScript(), T0 + timedelta(days=i)).completed() for i in range(7)]
    _written(console, repo, *scripts)
    newest_first = [s.saga_id for s in reversed(scripts)]
    signed_in("olivia")

    # when olivia pages through three at a time
    first = browser.get("/sagas?limit=3").text
    older_link = _link(first, "next")
    assert older_link is not None
    second = browser.get(older_link).text
    third_link = _link(second, "next")
    assert third_link is not None
    third = browser.get(third_link).text

    # then the pages are the list in order, nothing skipped or repeated, the last one ends it
    assert _listed(first) + _listed(second) + _listed(third) == newest_first
    assert _link(third, "next") is None and _link(first, "prev") is None

    # when two newer sagas arrive meanwhile
    arrivals = [_at(TripScript(), T0 + timedelta(days=30 + i)).completed() for i in range(2)]
    _written(console, repo, *arrivals)

    # then the same links show the same pages, forward and back
    assert _listed(browser.get(older_link).text) == _listed(second)
    back_link = _link(third, "prev")
    assert back_link is not None
    assert _listed(browser.get(back_link).text) == _listed(second)
    back_again = _link(second, "prev")
    assert back_again is not None
    assert _listed(browser.get(back_again).text) == _listed(first)
    # and the newest page now starts with the arrivals
    assert _listed(browser.get("/sagas?limit=3").text)[:2] == [
        arrivals[1].saga_id, arrivals[0].saga_id]


def test_the_list_and_the_saga_page_refresh_live_with_fragments(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    running = _at(TripScript(), T0).start().succeed("hold_flight")
    _written(console, repo, running)
    signed_in("olivia")
    page = browser.get("/sagas?status=RUNNING").text
    assert 'data-live="/sagas?status=RUNNING"' in page
    saga_page = browser.get(f"/sagas/{running.saga_id}").text
    assert f'data-live="/sagas/{running.saga_id}"' in saga_page

    # when the saga moves on, the fragments the script fetches show the new state
    running.succeed("hold_hotel").succeed("capture_payment").succeed("send_itinerary")
    running.finish(SagaStatus.COMPLETED)
    _written(console, repo, running)
    fragment = {"X-Sagafleet-Fragment": "1"}
    listed = browser.get("/sagas?status=RUNNING", headers=fragment)
    assert listed.status_code == 200 and "<html" not in listed.text
    assert running.saga_id not in listed.text
    live = browser.get(f"/sagas/{running.saga_id}", headers=fragment)
    assert "<html" not in live.text and 'class="state st-completed">COMPLETED' in live.text
    assert _graph(live.text)[("send_itinerary", "forward")] == "succeeded"


# -- escaping ------------------------------------------------------------------------------


def _hostile() -> TripScript:
    """A saga whose input, receipts and error messages are full of HTML and script."""
    script = _at(TripScript(), T0).start()
    started = script.events[0]
    hostile_input = {**started.input, "customer_email": HOSTILE, "flight_id": HOSTILE}
    script.events[0] = started.model_copy(update={"input": hostile_input,
                                                  "input_hash": payload_hash(hostile_input)})
    script.succeed("hold_flight", resource=HOSTILE).succeed("hold_hotel")
    script.fail("capture_payment")
    script.events[-1] = script.events[-1].model_copy(update={"message": HOSTILE})
    return script


def test_a_saga_id_full_of_html_is_not_found_and_shown_as_text(
        browser: TestClient, signed_in: Any) -> None:
    signed_in("olivia")
    page = browser.get("/sagas/%3Cscript%3Ealert(1)%3Cb%20onclick=x%3E")
    assert page.status_code == 404
    assert "<script>alert" not in page.text and "&lt;script&gt;alert(1)" in page.text


def test_values_from_agents_and_tools_render_inert(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    hostile = _hostile()
    _written(console, repo, hostile)
    signed_in("olivia")

    for page in (browser.get("/sagas"), browser.get(f"/sagas/{hostile.saga_id}")):
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert "<img src=x" not in page.text
        assert not INLINE_STYLE.search(page.text)  # no style attribute: the CSP forbids it
    saga_page = browser.get(f"/sagas/{hostile.saga_id}").text
    assert "&lt;script&gt;alert(" in saga_page  # shown, as text
    assert "<script" not in saga_page.split("</head>", 1)[1]


# -- the saga page -------------------------------------------------------------------------


NODE = re.compile(r'<g class="node (forward|compensation)[^"]*" data-step="([^"]+)" '
                  r'data-kind="([^"]+)" data-state="([^"]+)">')


def _graph(page: str) -> dict[tuple[str, str], str]:
    return {(step, kind): state for _, step, kind, state in NODE.findall(page)}


def test_the_graph_shows_every_step_and_compensation_with_its_state(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    saga = _at(TripScript(), T0).compensated()
    _written(console, repo, saga)
    signed_in("olivia")

    page = browser.get(f"/sagas/{saga.saga_id}").text

    assert "<svg" in page
    # (what the finished saga never reached is "not run")
    assert _graph(page) == {
        ("hold_flight", "forward"): "succeeded", ("hold_hotel", "forward"): "succeeded",
        ("capture_payment", "forward"): "failed", ("send_itinerary", "forward"): "not run",
        ("hold_flight", "compensation"): "succeeded",
        ("hold_hotel", "compensation"): "succeeded",
        ("capture_payment", "compensation"): "not run",
        ("send_itinerary", "compensation"): "not run",
    }
    definition = trip_definition()
    assert {step for step, _ in _graph(page)} == {s.id for s in definition.steps}
    # the receipts are shown with the steps
    assert "hold_flight-r" in page and "hold_flight-undo" in page


def test_replay_as_of_a_position_shows_the_earlier_state(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    saga = _at(TripScript(), T0).completed()
    _written(console, repo, saga)
    signed_in("olivia")
    now = browser.get(f"/sagas/{saga.saga_id}").text
    assert _graph(now)[("send_itinerary", "forward")] == "succeeded"

    # the position of hold_flight's StepSucceeded (the 4th event), from the timeline's links
    positions = re.findall(rf'href="/sagas/{saga.saga_id}\?at=(\d+)"', now)
    assert len(positions) == len(saga.events)
    then = browser.get(f"/sagas/{saga.saga_id}?at={positions[3]}")

    assert then.status_code == 200
    graph = _graph(then.text)
    assert graph[("hold_flight", "forward")] == "succeeded"
    assert graph[("hold_hotel", "forward")] != "succeeded"
    assert graph[("send_itinerary", "forward")] == "pending"
    assert "as of log position" in then.text
    assert 'class="state st-running">RUNNING' in then.text
    assert 'class="state st-completed">COMPLETED' in now
    # a position that is not one is refused, naming what it takes
    bad = browser.get(f"/sagas/{saga.saga_id}?at=soon")
    assert bad.status_code == 400 and "N or XID:N" in bad.text
    before = browser.get(f"/sagas/{saga.saga_id}?at=0")
    assert before.status_code == 400 and "there is no state as of 0" in before.text


def test_approvals_show_who_approved_and_a_waiting_saga_links_to_its_queue_item(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    signed_in("olivia", ("operator", "approver"))
    answered = _at(TripScript(), T0).start().succeed("hold_flight").succeed("hold_hotel")
    answered.ask_approval("capture_payment")
    answered.events.append(ApprovalGranted(
        at=answered.t + timedelta(seconds=5), step_id="capture_payment",
        kind=StepKind.FORWARD, action_hash="a" * 64, approver="olivia",
        expires_at=answered.t + timedelta(minutes=15), roles=["approver"]))
    waiting = _at(TripScript(), datetime.now(UTC) - timedelta(seconds=30)).start()
    waiting.succeed("hold_flight").succeed("hold_hotel").ask_approval("capture_payment")
    _written(console, repo, answered, waiting)

    page = browser.get(f"/sagas/{answered.saga_id}").text
    approvals = page.split('id="approvals"', 1)[1].split("</section>", 1)[0]
    assert "granted" in approvals and "requested" in approvals
    assert '<span class="principal">olivia</span>' in approvals
    assert "<td>person</td>" in approvals and "<td>approver</td>" in approvals
    assert "yes — by the principal directory" in approvals

    waiting_page = browser.get(f"/sagas/{waiting.saga_id}").text
    link = re.search(r'<a class="to-queue" href="([^"]+)"', waiting_page)
    assert link is not None
    anchor = f"q-{waiting.saga_id}-approval-capture_payment-forward"
    assert link.group(1) == f"/queue#{anchor}"
    assert f'id="{anchor}"' in browser.get("/queue").text  # the item it points at
    assert 'class="to-queue"' not in page  # the answered one waits for nobody


def test_the_timeline_shows_the_hash_chain_check_per_event(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    intact = _at(TripScript(), T0).completed()
    edited = _at(TripScript(), T0).compensated()
    _written(console, repo, intact, edited)
    with console.read.connection() as conn:
        conn.execute(
            "UPDATE eventstore.events SET data = jsonb_set(data, '{message}', '\"fine\"')"
            " WHERE stream_id = %s AND event_type = 'StepFailed'", (f"saga-{edited.saga_id}",))
    signed_in("olivia")

    good = browser.get(f"/sagas/{intact.saga_id}").text
    assert "Hash chain intact" in good
    assert good.count('class="chain chain-ok"') == len(intact.events)

    bad = browser.get(f"/sagas/{edited.saga_id}").text
    assert "Hash chain BROKEN" in bad
    verdicts = re.findall(r'class="chain chain-(\w+)"', bad)
    broken_at = verdicts.index("broken")
    assert verdicts[:broken_at] == ["ok"] * broken_at
    assert set(verdicts[broken_at + 1:]) <= {"unverified"}


def test_a_saga_at_risk_shows_its_business_alerts_now_not_as_of_the_past(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    # a saga that captured money long ago and stopped there (nothing confirmed, nothing offset)
    captured = _at(TripScript(), T0).start().succeed("hold_flight").succeed("hold_hotel")
    captured.succeed("capture_payment")
    finished = _at(TripScript(), T0).completed()
    _written(console, repo, captured, finished)
    signed_in("olivia")

    page = browser.get(f"/sagas/{captured.saga_id}").text
    risk = page.split('id="at-risk"', 1)[1].split("</section>", 1)[0]
    assert "captured without confirmation" in risk and "capture_payment" in risk
    assert 'id="at-risk"' not in browser.get(f"/sagas/{finished.saga_id}").text
    position = re.findall(rf'href="/sagas/{captured.saga_id}\?at=(\d+)"', page)[0]
    assert 'id="at-risk"' not in browser.get(f"/sagas/{captured.saga_id}?at={position}").text


def test_budget_and_stops_are_shown(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    saga = _at(TripScript(), T0).completed()
    _written(console, repo, saga)
    signed_in("olivia")
    page = browser.get(f"/sagas/{saga.saga_id}").text
    budget = page.split('id="budget"', 1)[1].split("</section>", 1)[0]
    assert "Retry budget left" in budget
    assert f"<dd>{trip_definition().retry_budget}</dd>" in budget
    assert "Cancel requested</dt><dd>no" in budget


def test_secret_inputs_stay_masked_in_every_part_of_the_page(
        console: Console, repo: PostgresSagaLog, browser: TestClient, signed_in: Any) -> None:
    # the trip's card token is a secret input; the script's failure message quotes it
    saga = _at(TripScript(), T0).start().succeed("hold_flight").fail("hold_hotel")
    _written(console, repo, saga)
    signed_in("olivia")
    page = browser.get(f"/sagas/{saga.saga_id}").text
    assert SECRET_CARD not in page
    assert "declined card ***" in page
