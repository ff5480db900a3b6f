"""Cumulative limits on the test kit (issue 31, part 3): a gate's ``saga_total`` bounds what
all calls of its tool move in one saga, its ``tenant_window`` what every saga of the tenant
moves in a sliding period; past either a person is asked, with the running total shown."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from saga_core import AgentPlan, PlannedAction, action_step_id
from saga_core.approval.totals import TENANT_WINDOW_SCOPE
from saga_core.contracts import SagaStatus, StepKind
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.engine.events import ApprovalRequested, StepStarted
from sagafleet.example_sagas import trip_tool_catalogue
from sagafleet.testing import TestFleet
from sagafleet.testing.tools import Fault
from sagafleet.testing.trip import TripTools

F = StepKind.FORWARD


def _catalogue(**gate: Any) -> ToolCatalogue:
    """The trip catalogue whose capture gate (above 100000 a person) adds ``gate``."""
    return ToolCatalogue(tools=[
        tool.model_copy(update={"gate": tool.gate.model_validate(
            {**tool.gate.model_dump(), **gate})})
        if tool.name == "payments.capture" and tool.gate is not None else tool
        for tool in trip_tool_catalogue().tools])


def _captures(count: int, amount: int, prefix: str = "capture") -> AgentPlan:
    """``count`` captures of ``amount`` in one plan, none waiting for another."""
    return AgentPlan(actions=[
        PlannedAction(tool="payments.capture", id=f"{prefix}_{i}", depends_on=[],
                      args={"amount": amount, "currency": "EUR", "reference": f"order-{i}",
                            "card_token": "${input.card_token}"})
        for i in range(count)])


def _fleet(**gate: Any) -> TestFleet:
    return TestFleet(definitions=[], tools=TripTools(catalogue=_catalogue(**gate)))


def _moved(fleet: TestFleet, saga_id: str) -> int:
    return sum(c.amount for c in fleet.tools.books.charges.values()  # type: ignore[union-attr]
               if c.saga_id == saga_id)


def _requests(fleet: TestFleet, saga_id: str) -> list[ApprovalRequested]:
    return [e for e in fleet.events(saga_id) if isinstance(e, ApprovalRequested)]


def test_six_captures_under_the_call_limit_stop_at_the_saga_total() -> None:
    # given a capture gate that lets one call of 100000 through, and 300000 per saga
    fleet = _fleet(saga_total={"limit": 300_000})
    client = fleet.client()
    plan = client.submit_plan(_captures(6, 100_000))
    saga_id = client.start(plan.name, {"card_token": "tok_1"}).saga_id
    # when the fleet runs every capture it may
    fleet.run_until_idle()
    # then three captures moved 300000, and each of the other three waits for a person
    assert _moved(fleet, saga_id) == 300_000
    state = fleet.state(saga_id)
    waiting = sorted(s for s, run in state.forward.items() if run.status == "awaiting_approval")
    assert len(waiting) == 3
    # with the running total in the evidence
    request = _requests(fleet, saga_id)[0]
    gate = request.evidence.details["gate"]
    assert gate["saga_total"] == {"limit": 300_000, "counted_calls": 3, "before": 300_000,
                                  "with_this_call": 400_000, "unjudged_calls": []}
    assert any("saga total of amount would be 400000" in r for r in gate["reasons"])
    # when a person approves one, it runs (and only it)
    fleet.person("ann").approve(saga_id, waiting[0])
    fleet.run_until_idle()
    assert _moved(fleet, saga_id) == 400_000


def test_without_a_saga_total_the_six_captures_run_as_before() -> None:
    fleet = _fleet()
    client = fleet.client()
    plan = client.submit_plan(_captures(6, 100_000))
    saga_id = client.start(plan.name, {"card_token": "tok_1"}).saga_id
    fleet.run_until_idle()
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert _moved(fleet, saga_id) == 600_000


def _sequential(amounts: list[int]) -> AgentPlan:
    return AgentPlan(actions=[
        PlannedAction(tool="payments.capture", id=f"capture_{i}",
                      args={"amount": amount, "currency": "EUR", "reference": f"order-{i}",
                            "card_token": "${input.card_token}"})
        for i, amount in enumerate(amounts)])


def test_a_capture_retried_after_a_transient_failure_counts_once() -> None:
    # given a saga total of 200000, two captures of 100000, the first failing once first
    fleet = _fleet(saga_total={"limit": 200_000})
    fleet.tools.fail_next("payments.capture", Fault.FAIL_BEFORE_COMMIT)  # type: ignore[union-attr]
    client = fleet.client()
    plan = client.submit_plan(_sequential([100_000, 100_000]))
    saga_id = client.start(plan.name, {"card_token": "tok_1"}).saga_id
    fleet.run_until_idle()
    fleet.advance(60)  # the retry's backoff
    fleet.run_until_idle()
    # then both ran with no person asked: the retry is the same call under the same key
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    assert _moved(fleet, saga_id) == 200_000 and _requests(fleet, saga_id) == []


def test_a_capture_whose_outcome_was_unknown_counts() -> None:
    # given a saga total of 150000; the first capture commits but its answer is lost
    fleet = _fleet(saga_total={"limit": 150_000})
    fleet.tools.fail_next("payments.capture", Fault.COMMIT_THEN_TIMEOUT)  # type: ignore[union-attr]
    client = fleet.client()
    plan = client.submit_plan(_sequential([100_000, 100_000]))
    saga_id = client.start(plan.name, {"card_token": "tok_1"}).saga_id
    for _ in range(5):  # lookups by key find the capture
        fleet.run_until_idle()
        fleet.advance(60)
    # then the second capture waits for a person: the first may have moved money, and did
    (request,) = _requests(fleet, saga_id)
    assert request.step_id == "capture_1"
    assert request.evidence.details["gate"]["saga_total"]["before"] == 100_000
    assert _moved(fleet, saga_id) == 100_000


def test_the_tenant_window_stops_a_second_saga_and_shows_the_window() -> None:
    # given a window of 500000 per hour on captures, and two sagas of three captures each
    fleet = _fleet(tenant_window={"limit": 500_000, "period": "PT1H"})
    client = fleet.client()
    plan = client.submit_plan(_captures(3, 100_000))
    first = client.start(plan.name, {"card_token": "tok_1"}, key="a").saga_id
    fleet.run_until_idle()
    second = client.start(plan.name, {"card_token": "tok_1"}, key="b").saga_id
    fleet.run_until_idle()
    # then the first moved 300000, the second 200000, and its third capture waits
    assert (_moved(fleet, first), _moved(fleet, second)) == (300_000, 200_000)
    (request,) = _requests(fleet, second)
    assert request.scope == TENANT_WINDOW_SCOPE
    window = request.evidence.details["gate"]["tenant_window"]
    assert window == {"window": "payments.capture:amount", "limit": 500_000, "period": "PT1H",
                      "counted_calls": 5, "before": 500_000, "with_this_call": 600_000}
    assert "tenant window" in request.evidence.reason
    # when a person approves going over the window, the capture runs
    fleet.person("ann").approve(second, request.step_id)
    fleet.run_until_idle()
    assert _moved(fleet, second) == 300_000
    assert fleet.state(second).status is SagaStatus.COMPLETED


def test_the_window_slides_and_is_per_tenant() -> None:
    fleet = _fleet(tenant_window={"limit": 200_000, "period": "PT1H"})
    ours, theirs = fleet.client(), fleet.client(tenant="other")
    plan = _captures(2, 100_000)
    name = ours.submit_plan(plan).name
    full = ours.start(name, {"card_token": "tok_1"}, key="a").saga_id
    fleet.run_until_idle()
    assert _moved(fleet, full) == 200_000
    # another tenant's window is its own
    other = theirs.start(theirs.submit_plan(plan).name, {"card_token": "tok_1"}).saga_id
    fleet.run_until_idle()
    assert _moved(fleet, other) == 200_000
    # our next saga waits within the hour, and an hour later the window has room again
    waits = ours.start(name, {"card_token": "tok_1"}, key="b").saga_id
    fleet.run_until_idle()
    assert _moved(fleet, waits) == 0 and _requests(fleet, waits)
    fleet.advance(3601)
    later = ours.start(name, {"card_token": "tok_1"}, key="c").saga_id
    fleet.run_until_idle()
    assert _moved(fleet, later) == 200_000 and _requests(fleet, later) == []


def test_a_declined_capture_releases_its_window_reservation() -> None:
    fleet = _fleet(tenant_window={"limit": 100_000, "period": "PT1H"})
    client = fleet.client()
    plan = AgentPlan(actions=[PlannedAction(
        tool="payments.capture", args={"amount": 100_000, "currency": "EUR",
                                       "card_token": "${input.card_token}"})])
    name = client.submit_plan(plan).name
    declined = client.start(name, {"card_token": "tok_declined"}, key="a").saga_id
    fleet.run_until_idle()
    assert fleet.state(declined).status is SagaStatus.COMPENSATED
    # then the window has its room back for the next saga
    paid = client.start(name, {"card_token": "tok_1"}, key="b").saga_id
    fleet.run_until_idle()
    assert _moved(fleet, paid) == 100_000
    assert _requests(fleet, paid) == []


def test_window_calls_are_claimed_one_a_commit_and_each_reserved() -> None:
    # given three parallel captures under a roomy window
    fleet = _fleet(tenant_window={"limit": 1_000_000, "period": "PT1H"})
    client = fleet.client()
    plan = _captures(3, 100_000)
    saga_id = client.start(client.submit_plan(plan).name, {"card_token": "tok_1"}).saga_id
    fleet.run_until_idle()
    # then all ran, each claimed by its own claim (none claimed ahead without a reservation)
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED
    starts = [e for e in fleet.events(saga_id) if isinstance(e, StepStarted)]
    assert sorted(e.step_id for e in starts) == sorted(
        action_step_id(a) for a in plan.actions)
    total = fleet.gate_windows.total("default", "payments.capture:amount", timedelta(hours=1),
                                     fleet.clock())
    assert (total.before, total.calls) == (300_000, 3)
