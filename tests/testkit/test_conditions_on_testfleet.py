"""Postconditions, step timeouts, compensation deadlines and forward preconditions on the test
kit: the payout example on the real orchestration code, in memory, on a test clock."""

from __future__ import annotations

from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import (
    DeadlineMissed,
    ManualInterventionRequired,
    PostconditionNotObserved,
    PostconditionObserved,
    ReconciliationResult,
    SagaEvent,
    StepSucceeded,
)
from saga_core.engine.state import RunStatus
from sagafleet.example_sagas import payout_definition
from sagafleet.testing import Fault, PayoutTools, TestFleet

F, C = StepKind.FORWARD, StepKind.COMPENSATION
INPUT = {"source": "acc-a", "destination": "acc-b", "amount": 500}
# A lease far longer than every declared time, so what fires is the declared time.
LONG_LEASE_S = 7_200.0


def _fleet(*, lease_s: float = 30.0) -> tuple[TestFleet, PayoutTools]:
    tools = PayoutTools()
    tools.books.balances.update({"acc-a": 1_000, "acc-b": 0})
    return TestFleet([payout_definition()], tools, lease_s=lease_s), tools


def _of(events: list[SagaEvent], kind: type[SagaEvent]) -> list[SagaEvent]:
    return [e for e in events if isinstance(e, kind)]


def test_a_credit_whose_postcondition_is_observed_completes_the_payout() -> None:
    # given a payout into an account that settles at once
    fleet, tools = _fleet()
    saga = fleet.client().start("payout", INPUT, key="p-ok")
    # when the fleet runs it
    fleet.run_until_idle()
    # then the credit was looked up by key, found settled, and only then advanced
    events = fleet.events(saga.saga_id)
    (observed,) = _of(events, PostconditionObserved)
    assert observed.step_id == "credit" and observed.how == "lookup"  # type: ignore[attr-defined]
    lookups = [e for e in _of(events, ReconciliationResult) if e.step_id == "credit"]
    assert [e.result for e in lookups] == ["found"]  # type: ignore[attr-defined]
    assert events.index(lookups[0]) < events.index(observed)
    assert fleet.state(saga.saga_id).status is SagaStatus.COMPLETED
    assert tools.books.balances == {"acc-a": 500, "acc-b": 500}
    assert tools.books.money_out() == 0


def test_a_credit_seen_only_after_slow_visibility_is_observed_on_a_later_lookup() -> None:
    # given a credit committed but invisible to lookups for 30 s
    fleet, tools = _fleet()
    tools.fail_next("accounts.credit", Fault.SLOW_VISIBILITY, delay_s=30)
    saga = fleet.client().start("payout", INPUT, key="p-slow")
    # when time passes up to the postcondition's horizon (120 s; the last lookup is at it)
    fleet.run_until_idle()
    assert fleet.state(saga.saga_id).run("credit", F).status is RunStatus.RECONCILING
    fleet.advance(120)
    # then the lookups found nothing, then found it settled, and the payout completed
    events = fleet.events(saga.saga_id)
    results = [e.result for e in _of(events, ReconciliationResult)]  # type: ignore[attr-defined]
    assert results[0] == "absent" and results[-1] == "found"
    assert len(_of(events, PostconditionObserved)) == 1
    assert fleet.state(saga.saga_id).status is SagaStatus.COMPLETED


def test_a_credit_never_settled_is_reconciled_then_escalated_never_advanced() -> None:
    # given a payout into an account whose transfers stay pending
    fleet, tools = _fleet()
    tools.books.unsettled.add("acc-b")
    saga = fleet.client().start("payout", INPUT, key="p-pending")
    # when the fleet runs it past the postcondition's horizon
    fleet.run_until_idle()
    fleet.advance(300)
    # then it was looked up several times, then paused for a person with the reason
    state = fleet.state(saga.saga_id)
    assert state.status is SagaStatus.MANUAL_INTERVENTION
    events = fleet.events(saga.saga_id)
    lookups = [e for e in _of(events, ReconciliationResult) if e.step_id == "credit"]
    assert len(lookups) >= 2
    (missed,) = _of(events, PostconditionNotObserved)
    assert "not observed within its horizon" in missed.reason  # type: ignore[attr-defined]
    (manual,) = _of(events, ManualInterventionRequired)
    assert manual.step_id == "credit"  # type: ignore[attr-defined]
    assert manual.evidence.details["invariant"] == payout_definition().invariant  # type: ignore[attr-defined]
    # and the credit never advanced: a receipt, but no success and no observed postcondition
    credit = state.run("credit", F)
    assert credit.status is RunStatus.VERIFYING and credit.receipt is not None
    assert _of(events, PostconditionObserved) == []
    successes = [e for e in _of(events, StepSucceeded) if e.step_id == "credit"]
    assert len(successes) == 1  # the receipt, recorded as a fact


def test_a_failed_forward_precondition_compensates_as_the_definition_says() -> None:
    # given a source account whose balance does not cover the amount
    fleet, tools = _fleet()
    tools.books.balances["acc-a"] = 100
    saga = fleet.client().start("payout", INPUT, key="p-poor")
    # when the fleet runs it
    fleet.run_until_idle()
    # then the debit was refused by its precondition and the saga compensated (nothing to
    # undo), never crediting anyone
    state = fleet.state(saga.saga_id)
    assert state.status is SagaStatus.COMPENSATED
    assert state.run("debit", F).error_class == "PreconditionFailed"
    assert "precondition of debit failed" in (state.compensation_reason or "")
    assert "balance of acc-a is 100" in (state.compensation_reason or "")
    assert tools.books.credits == {} and tools.books.balances["acc-a"] == 100


def test_a_debit_past_its_timeout_escalates_as_the_definition_says() -> None:
    # given a debit whose worker dies after the bank committed it (its claim stays open)
    fleet, tools = _fleet(lease_s=LONG_LEASE_S)
    tools.fail_next("accounts.debit", Fault.WORKER_CRASH_AFTER_COMMIT)
    saga = fleet.client().start("payout", INPUT, key="p-hang")
    fleet.run_until_idle()
    assert fleet.state(saga.saga_id).run("debit", F).status is RunStatus.STARTED
    # when its timeout (10 s) passes, long before the lease would
    fleet.advance(15)
    # then the miss is an event with the reason, and the saga waits for a person
    events = fleet.events(saga.saga_id)
    (missed,) = _of(events, DeadlineMissed)
    assert missed.deadline_kind == "step_timeout" and missed.policy == "escalate"  # type: ignore[attr-defined]
    assert "ran past its timeout of 10 s" in missed.reason  # type: ignore[attr-defined]
    state = fleet.state(saga.saga_id)
    assert state.status is SagaStatus.MANUAL_INTERVENTION
    assert state.run("debit", F).status is RunStatus.UNKNOWN
    # and a person's resume looks the debit up by key and goes on
    fleet.person("ops", roles=["operator"]).resolve(saga.saga_id, "resume", step_id="debit",
                                                    reason="bank confirms the debit")
    fleet.advance(5)
    assert fleet.state(saga.saga_id).status is SagaStatus.COMMITTED_WITH_REPAIR
    assert tools.books.money_out() == 0


def test_a_refund_not_done_by_its_deadline_escalates_with_the_reason() -> None:
    # given a payout whose credit is refused, and whose refund's worker dies mid-call
    fleet, tools = _fleet(lease_s=LONG_LEASE_S)
    tools.fail_next("accounts.credit", Fault.FAIL_BEFORE_COMMIT, error_class="BusinessRejection")
    tools.fail_next("accounts.refund", Fault.WORKER_CRASH_AFTER_COMMIT)
    saga = fleet.client().start("payout", INPUT, key="p-late-refund")
    fleet.run_until_idle()
    state = fleet.state(saga.saga_id)
    assert state.phase == "compensating"
    assert state.run("debit", C).status is RunStatus.STARTED
    # when the refund's deadline (600 s after compensation began) passes
    fleet.advance(700)
    # then the miss is recorded with its reason and a person is asked
    events = fleet.events(saga.saga_id)
    (missed,) = _of(events, DeadlineMissed)
    assert missed.deadline_kind == "compensation_deadline"  # type: ignore[attr-defined]
    assert "not done by its deadline" in missed.reason  # type: ignore[attr-defined]
    (manual,) = _of(events, ManualInterventionRequired)
    assert (manual.step_id, manual.kind) == ("debit", C)  # type: ignore[attr-defined]
    assert fleet.state(saga.saga_id).status is SagaStatus.MANUAL_INTERVENTION
