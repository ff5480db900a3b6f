"""Invariants, postconditions, step timeouts, compensation deadlines and forward preconditions:
the pure rules (saga_core.engine.condition_rules and decide), on the payout example."""

from __future__ import annotations

from datetime import timedelta

import pytest
from core_harness import C, F, Saga, kinds

from saga_core import ErrorClass, OperatorAction, Receipt, SagaStatus, due_work
from saga_core.engine.decision_types import (
    BeginCompensation,
    Escalate,
    MissDeadline,
    ObservePostcondition,
    Reconcile,
)
from saga_core.engine.events import DeadlineMissed, PostconditionNotObserved, PostconditionObserved
from saga_core.engine.state import RunStatus
from sagafleet.example_sagas import payout_definition

INPUT = {"source": "acc-a", "destination": "acc-b", "amount": 500}
DEBIT = Receipt(resource_id="DB-1", version=1, status="posted",
                fields={"account": "acc-a", "amount": 500, "balance": 100})
PENDING = Receipt(resource_id="CR-1", version=1, status="pending",
                  fields={"account": "acc-b", "amount": 500})
SETTLED = PENDING.model_copy(update={"status": "settled"})


@pytest.fixture
def payout() -> Saga:
    return Saga(payout_definition(), dict(INPUT))


def _debited(saga: Saga) -> Saga:
    saga.record()
    saga.claim("debit")
    saga.succeed("debit", receipt=DEBIT)
    saga.record()  # credit scheduled
    return saga


def _credit_received(saga: Saga, receipt: Receipt = PENDING) -> Saga:
    _debited(saga)
    saga.claim("credit")
    saga.succeed("credit", receipt=receipt)
    return saga


# -- postconditions ------------------------------------------------------------------------


def test_a_receipt_alone_does_not_advance_a_step_whose_tool_declares_a_postcondition(
    payout: Saga,
) -> None:
    # given a credit whose receipt arrived
    _credit_received(payout, SETTLED)
    # then the credit is verifying (in doubt), and the first decision is a lookup by key
    assert payout.state.run("credit", F).status is RunStatus.VERIFYING
    (lookup,) = payout.record()
    assert isinstance(lookup, Reconcile) and lookup.not_before == payout.now
    assert "postcondition" in lookup.reason
    assert payout.state.status is SagaStatus.RUNNING


def test_a_postcondition_observed_through_lookup_advances_the_saga(payout: Saga) -> None:
    # given a credit verifying, and a lookup by key that finds it settled
    _credit_received(payout, PENDING)
    payout.record()
    payout.lookup("credit", "found", receipt=SETTLED)
    # when the orchestrator decides
    (observed,) = payout.record()
    # then the postcondition is recorded as observed, with the receipt that showed it
    assert isinstance(observed, ObservePostcondition) and observed.how == "lookup"
    assert observed.receipt == SETTLED
    event = payout.events[-1]
    assert isinstance(event, PostconditionObserved) and "settled" in event.detail
    assert payout.state.run("credit", F).status is RunStatus.SUCCEEDED
    (finish,) = payout.record()
    assert finish.state is SagaStatus.COMPLETED  # type: ignore[attr-defined]


def test_a_postcondition_not_observed_within_its_horizon_is_reconciled_then_escalated(
    payout: Saga,
) -> None:
    # given a credit whose lookups keep finding it pending
    _credit_received(payout, PENDING)
    end = payout.now + timedelta(seconds=120)
    lookups = 0
    while payout.state.status is not SagaStatus.MANUAL_INTERVENTION:
        decisions = payout.record()
        if not decisions:
            run = payout.state.run("credit", F)
            assert run.status is RunStatus.RECONCILING and run.not_before is not None
            assert run.not_before <= end  # never looked up later than the horizon
            payout.now = max(payout.now, run.not_before)
            payout.lookup("credit", "found", receipt=PENDING)
            lookups += 1
        assert lookups < 20
    # then it was looked up, never advanced, and escalated with the reason
    assert lookups >= 2
    credit = payout.state.run("credit", F)
    assert credit.status is RunStatus.VERIFYING and credit.postcondition_missed
    missed = [e for e in payout.events if isinstance(e, PostconditionNotObserved)]
    assert len(missed) == 1 and missed[0].horizon_end == end
    assert "not observed within its horizon" in missed[0].reason
    assert "status in ['settled']" in missed[0].reason
    escalation = payout.state.escalation
    assert escalation is not None and escalation.step_id == "credit"
    assert payout.state.forward["credit"].status not in (RunStatus.SUCCEEDED,)
    assert payout.record() == []  # paused: nothing more


def test_the_escalation_evidence_states_the_business_invariant(payout: Saga) -> None:
    # given a payout whose debit was claimed (its timeout of 10 s escalates, on_timeout)
    payout.record()
    payout.claim("debit")
    payout.tick(10)
    # when the orchestrator decides at the debit's timeout
    missed, escalate = payout.record()
    # then the miss and the escalation are recorded together, with the invariant
    assert isinstance(missed, MissDeadline) and missed.policy == "escalate"
    assert isinstance(escalate, Escalate)
    assert escalate.evidence.details["invariant"] == payout.definition.invariant
    assert escalate.evidence.details["status"] == "unknown"


def test_an_operator_resume_gives_the_postcondition_a_fresh_horizon(payout: Saga) -> None:
    # given a credit escalated for a postcondition not observed
    _credit_received(payout, PENDING)
    for _ in range(20):
        if payout.state.status is SagaStatus.MANUAL_INTERVENTION:
            break
        if not payout.record():
            payout.now = max(payout.now, payout.state.run("credit", F).not_before or payout.now)
            payout.lookup("credit", "found", receipt=PENDING)
    # when a person resumes it and a later lookup finds it settled
    payout.append(OperatorAction(at=payout.now, action="resume", step_id="credit", kind=F,
                                 actor="op"))
    (lookup,) = payout.record()
    assert isinstance(lookup, Reconcile)
    payout.lookup("credit", "found", receipt=SETTLED)
    # then it advances (and ends honestly: a person stepped in)
    payout.settle()
    assert payout.state.status is SagaStatus.COMMITTED_WITH_REPAIR


# -- step timeouts -------------------------------------------------------------------------


def test_a_call_past_its_timeout_is_an_event_and_its_outcome_unknown(payout: Saga) -> None:
    # given a credit claimed (timeout 20 s from its tool; on_timeout compensate)
    _debited(payout)
    payout.claim("credit")
    timeout_at = payout.state.run("credit", F).timeout_at
    assert timeout_at == payout.now + timedelta(seconds=20)
    # then nothing is due before its timeout, and the sweeper sees it when it passes
    payout.tick(19)
    assert payout.record() == []
    assert due_work(payout.state, payout.now, timedelta(0)) == []
    payout.tick(1)
    (item,) = due_work(payout.state, payout.now, timedelta(0))
    assert (item.action, item.step_id, item.due_since) == ("timeout", "credit", timeout_at)
    # when the orchestrator decides
    (missed,) = payout.record()
    assert isinstance(missed, MissDeadline) and missed.policy == "compensate"
    assert payout.state.run("credit", F).status is RunStatus.UNKNOWN
    # then the policy follows: compensation begins, the credit is looked up first
    (begin,) = payout.record()
    assert isinstance(begin, BeginCompensation) and "timeout" in begin.reason
    (lookup,) = payout.record()
    assert isinstance(lookup, Reconcile) and lookup.step_id == "credit"
    # and found absent after its commit horizon, only the debit is refunded
    payout.lookup("credit", "absent")
    payout.tick(31)
    payout.settle()
    payout.lookup("credit", "absent")
    decisions = payout.settle()
    assert "ScheduleCompensation" in kinds(decisions)
    payout.claim("debit", C)
    payout.succeed("debit", C)
    payout.settle()
    assert payout.state.status is SagaStatus.COMPENSATED


def test_a_timeout_under_policy_retry_looks_the_call_up_before_any_retry() -> None:
    # given a payout whose credit declares on_timeout: retry
    data = payout_definition().model_dump(mode="json")
    data["steps"][1]["on_timeout"] = "retry"
    from saga_core import SagaDefinition
    from saga_core.definitions.validation import validate_definition
    from sagafleet.example_sagas import payout_tool_catalogue
    definition = validate_definition(SagaDefinition.model_validate(data), payout_tool_catalogue())
    saga = _debited(Saga(definition, dict(INPUT)))
    saga.claim("credit")
    saga.tick(20)
    # when the timeout passes
    (missed,) = saga.record()
    assert isinstance(missed, MissDeadline) and missed.policy == "retry"
    # then the call is reconciled by key, and a late receipt is still a fact
    (lookup,) = saga.record()
    assert isinstance(lookup, Reconcile)
    saga.lookup("credit", "found", receipt=SETTLED)
    # (the found receipt is recorded, and its postcondition observed by the next lookup)
    assert kinds(saga.settle()) == ["AcceptReconciledReceipt", "Reconcile"]
    saga.lookup("credit", "found", receipt=SETTLED)
    saga.settle()
    assert saga.state.status is SagaStatus.COMPLETED
    assert sum(isinstance(e, DeadlineMissed) for e in saga.events) == 1


# -- compensation deadlines ----------------------------------------------------------------


def test_a_compensation_deadline_missed_escalates_once_with_the_reason(payout: Saga) -> None:
    # given a debit done and a credit refused, so the debit is being refunded
    _debited(payout)
    payout.claim("credit")
    payout.fail("credit", ErrorClass.BUSINESS_REJECTION, msg="account closed")
    (begin,) = payout.record()
    assert isinstance(begin, BeginCompensation)
    payout.record()  # the refund is scheduled
    payout.claim("debit", C)
    payout.fail("debit", ErrorClass.TRANSIENT, kind=C, msg="bank 503")
    payout.record()  # retried after a backoff
    # when the refund's deadline (600 s after compensation began) passes undone
    payout.tick(600)
    (item,) = [d for d in due_work(payout.state, payout.now, timedelta(0))
               if d.action == "deadline"]
    assert item.step_id == "debit" and item.kind is C
    missed, escalate = payout.record()
    # then the miss is recorded with its reason and the saga waits for a person
    assert isinstance(missed, MissDeadline) and missed.deadline_kind == "compensation_deadline"
    assert "not done by its deadline" in missed.reason
    assert isinstance(escalate, Escalate) and escalate.kind is C
    assert payout.state.status is SagaStatus.MANUAL_INTERVENTION
    # and after a person's retry it is not escalated again for the same deadline
    payout.append(OperatorAction(at=payout.now, action="retry_step", step_id="debit", kind=C,
                                 actor="op"))
    decisions = payout.record()
    assert kinds(decisions) == ["ScheduleCompensation"]
    payout.claim("debit", C)
    payout.succeed("debit", C)
    payout.settle()
    assert payout.state.status is SagaStatus.COMPENSATED


# -- forward preconditions -----------------------------------------------------------------


def test_a_forward_precondition_is_resolved_and_sent_with_the_arguments(payout: Saga) -> None:
    from saga_core import resolve_command
    payout.record()
    command = resolve_command(payout.state, "debit", F)
    assert command.precondition == {"balance_at_least": 500}
    assert command.args == {"account": "acc-a", "amount": 500}


@pytest.mark.parametrize(
    ("policy", "first"),
    [("compensate", "BeginCompensation"), ("escalate", "Escalate"),
     ("retry", "RetryAfterBackoff")],
)
def test_a_failed_forward_precondition_follows_the_declared_policy(
    policy: str, first: str
) -> None:
    from saga_core import SagaDefinition
    from saga_core.definitions.validation import validate_definition
    from sagafleet.example_sagas import payout_tool_catalogue
    data = payout_definition().model_dump(mode="json")
    data["steps"][0]["on_precondition_failed"] = policy
    definition = validate_definition(SagaDefinition.model_validate(data), payout_tool_catalogue())
    saga = Saga(definition, dict(INPUT))
    saga.record()
    saga.claim("debit")
    saga.fail("debit", ErrorClass.PRECONDITION_FAILED, msg="balance 100 < 500")
    decisions = saga.record()
    assert kinds(decisions)[0] == first
    reason = decisions[0].reason  # type: ignore[attr-defined]
    assert "precondition of debit failed: balance 100 < 500" in reason
