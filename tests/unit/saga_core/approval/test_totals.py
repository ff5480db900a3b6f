"""The saga's running total, pure (issue 31, part 3): which calls count, what a claim checks,
what a commit releases from a tenant window, and what a dry run can promise."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from core_harness import C, F, Saga, person

from saga_core import (
    AgentPlan,
    ErrorClass,
    PlannedAction,
    Receipt,
    RequestApproval,
    check_claim,
    validate_plan,
)
from saga_core.approval.answers import check_approval
from saga_core.approval.risk_gates import AmountLimit
from saga_core.approval.totals import may_have_moved, running_total, window_call, window_releases
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.engine.dry_run import plan_start, start_event
from sagafleet.example_sagas import trip_tool_catalogue

ABOVE = AmountLimit(arg="amount", limit=100_000)


def _catalogue(**gate: Any) -> ToolCatalogue:
    return ToolCatalogue(tools=[
        tool.model_copy(update={"gate": tool.gate.model_validate(
            {**tool.gate.model_dump(), **gate})})
        if tool.name == "payments.capture" and tool.gate is not None else tool
        for tool in trip_tool_catalogue().tools])


def _saga(amounts: list[Any], **gate: Any) -> Saga:
    """A plan saga of parallel captures of ``amounts``, its first decisions recorded."""
    plan = AgentPlan(actions=[
        PlannedAction(tool="payments.capture", id=f"c{i}", depends_on=[],
                      args={"amount": amount, "currency": "EUR", "reference": f"r{i}",
                            "card_token": "${input.card_token}"})
        for i, amount in enumerate(amounts)])
    saga = Saga(validate_plan(plan, _catalogue(**gate)), {"card_token": "tok"})
    saga.record()
    return saga


def test_a_call_counts_from_its_claim_until_it_is_known_to_have_had_no_effect() -> None:
    saga = _saga([100_000, 100_000])
    run = saga.state.run("c0", F)
    assert not may_have_moved(saga.state, run)  # scheduled, never claimed
    saga.claim("c0")
    assert may_have_moved(saga.state, saga.state.run("c0", F))  # started: it may have
    saga.unknown("c0")
    assert may_have_moved(saga.state, saga.state.run("c0", F))  # outcome unknown
    saga.claim("c1")
    saga.fail("c1", ErrorClass.BUSINESS_REJECTION)
    assert not may_have_moved(saga.state, saga.state.run("c1", F))  # declined: it did not


def test_a_compensated_call_stops_counting() -> None:
    saga = _saga([100_000, 100_000])
    saga.claim("c0")
    saga.succeed("c0", receipt=Receipt(resource_id="ch1", fields={"amount": 100_000,
                                                                  "currency": "EUR"}))
    saga.claim("c1")
    saga.fail("c1", ErrorClass.BUSINESS_REJECTION)
    saga.settle()  # compensation begins: the refund of c0 is scheduled
    assert may_have_moved(saga.state, saga.state.run("c0", F))
    saga.claim("c0", C)
    saga.succeed("c0", C)
    assert not may_have_moved(saga.state, saga.state.run("c0", F))


def test_the_running_total_is_the_other_counted_calls_as_first_claimed() -> None:
    saga = _saga([100_000, 70_000, 50_000])
    saga.claim("c0")
    saga.claim("c1")
    total = running_total(saga.state, "c2", F, ABOVE)
    assert (total.amount, total.calls, total.unjudged) == (Decimal(170_000), 2, ())


def test_six_captures_are_scheduled_but_only_three_may_be_claimed() -> None:
    # given six parallel captures of 100000 and a saga total of 300000
    saga = _saga([100_000] * 6, saga_total={"limit": 300_000})
    assert all(saga.state.run(f"c{i}", F).status == "scheduled" for i in range(6))
    # when a worker claims them one after another, each judged with the claims before it
    verdicts = []
    for i in range(6):
        verdict = check_claim(saga.state, f"c{i}", F, 1, saga.now)
        verdicts.append(verdict.ok)
        if verdict.ok:
            saga.claim(f"c{i}")
    # then three are claimed; the fourth is refused and decide asks a person for it
    assert verdicts == [True, True, True, False, False, False]
    requests = [d for d in saga.record() if isinstance(d, RequestApproval)]
    assert [r.step_id for r in requests] == ["c3", "c4", "c5"]
    assert requests[0].evidence.details["gate"]["saga_total"]["with_this_call"] == 400_000


def test_a_later_capture_past_the_saga_total_asks_before_it_is_scheduled() -> None:
    # given a capture of 200000 claimed, and a dependent one of 100000 next, total 250000
    plan = AgentPlan(actions=[
        PlannedAction(tool="payments.capture", id="a",
                      args={"amount": 100_000, "currency": "EUR", "card_token": "${input.t}"}),
        PlannedAction(tool="payments.capture", id="b",
                      args={"amount": 100_000, "currency": "USD", "card_token": "${input.t}"}),
        PlannedAction(tool="payments.capture", id="c",
                      args={"amount": 60_000, "currency": "EUR", "card_token": "${input.t}"}),
    ])
    saga = Saga(validate_plan(plan, _catalogue(saga_total={"limit": 250_000})), {"t": "x"})
    saga.settle()
    saga.run_ok("a")
    saga.settle()
    saga.run_ok("b")
    # when c becomes ready, it is not scheduled: a person is asked first
    (decision,) = saga.record()
    assert isinstance(decision, RequestApproval) and decision.step_id == "c"
    assert "saga total of amount would be 260000" in " ".join(
        decision.evidence.details["gate"]["reasons"])


def test_an_unjudgeable_amount_among_the_counted_calls_asks_a_person() -> None:
    # given a call whose amount is not a number (so a person was asked for it) and another
    saga = _saga([10**16, 10], saga_total={"limit": 1_000_000})
    assert saga.state.run("c0", F).status == "awaiting_approval"
    assert saga.state.run("c1", F).status == "scheduled"
    # when a person approves the first and it is claimed, the total can no longer be summed
    run = saga.state.run("c0", F)
    assert run.approval is not None
    grant = check_approval(saga.state, "c0", F, run.approval.action_hash,
                           person("ann"), saga.now)
    assert grant is not None
    saga.append(grant)
    saga.record()
    saga.claim("c0")
    verdict = check_claim(saga.state, "c1", F, 1, saga.now)
    # then the second may not be claimed without a person either
    assert not verdict.ok and verdict.ask_again
    (request,) = [d for d in saga.record() if isinstance(d, RequestApproval)]
    assert request.step_id == "c1"
    assert any("cannot be summed" in r for r in request.evidence.details["gate"]["reasons"])


def test_a_commit_releases_the_window_reservation_of_a_call_that_turned_out_void() -> None:
    saga = _saga([100_000], tenant_window={"limit": 500_000, "period": "PT1H"})
    saga.claim("c0")
    before = saga.state
    key = before.run("c0", F).operation_key
    call = window_call(before, "c0", F, saga.now)
    assert call is not None and call.operation_key == key and call.amount == Decimal(100_000)
    saga.fail("c0", ErrorClass.BUSINESS_REJECTION)
    assert window_releases(before, saga.state) == [key]
    # a commit that changes nothing about it releases nothing
    assert window_releases(saga.state, saga.state) == []


def test_a_dry_run_says_a_cumulative_gate_is_decided_when_the_call_runs() -> None:
    plan = AgentPlan(actions=[PlannedAction(
        tool="payments.capture", args={"amount": 100_000, "currency": "EUR",
                                       "card_token": "${input.t}"})])
    spec = validate_plan(plan, _catalogue(saga_total={"limit": 250_000}))
    started = start_event(spec, saga_id="s", tenant="t", public_input={"t": "x"}, key=None,
                          actor="a", reason="", now=datetime(2026, 1, 1, tzinfo=UTC))
    (step,) = plan_start(spec, started, saga_id_final=True).steps
    assert step.forward.gate is not None and step.forward.gate.will_ask is None
    assert "the saga's total of amount > 250000" in step.forward.gate.condition


def test_under_every_limit_the_capture_is_scheduled_and_claimable() -> None:
    saga = _saga([100_000, 100_000], saga_total={"limit": 300_000})
    assert [saga.state.run(s, F).status for s in ("c0", "c1")] == ["scheduled", "scheduled"]
    saga.claim("c0")
    assert check_claim(saga.state, "c1", F, 1, saga.now).ok
