"""One scenario per row of the seed article's failure table, plus its pure checklist items."""

from __future__ import annotations

from datetime import timedelta

import pytest
from core_harness import RECEIPTS, C, F, Saga, kinds, person, trip_input

from saga_core import (
    AcceptReconciledReceipt,
    AgentPlan,
    ApprovalRequested,
    CompensationCommand,
    DeclareOutcomeUnknown,
    ErrorClass,
    Escalate,
    KeyReuseError,
    OperatorAction,
    PlannedAction,
    Receipt,
    Reconcile,
    RequestApproval,
    RetryAfterBackoff,
    SagaDefinition,
    SagaStatus,
    ScheduleCompensation,
    Semantics,
    StepDefinition,
    ToolCatalogue,
    ToolSpec,
    check_approval,
    check_key_payload,
    operation_key,
    payload_hash,
    validate_definition,
    validate_plan,
)
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue


def _flight_in_flight() -> Saga:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.claim("hold_flight")
    return saga


def _compensating_flight() -> Saga:
    """Flight held, hotel rejected: the flight release is scheduled."""
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.run_ok("hold_flight")
    saga.claim("hold_hotel")
    saga.fail("hold_hotel", ErrorClass.BUSINESS_REJECTION)
    saga.settle()
    assert saga.state.run("hold_flight", C).status == "scheduled"
    return saga


# Row 1: timeout before the request reaches the provider -> reconcile; retry only when absence
# is confirmed and the provider dedupes by key.
def test_timeout_before_provider_reconciles_then_retries_with_same_key() -> None:
    saga = _flight_in_flight()
    key = saga.state.run("hold_flight", F).operation_key
    saga.unknown("hold_flight")
    assert saga.record() == [Reconcile("hold_flight", F, 1, saga.now, "outcome unknown")]
    assert saga.record() == []  # a lookup is pending; nothing is retried blindly
    saga.lookup("hold_flight", "absent")
    (retry,) = saga.record()
    assert isinstance(retry, RetryAfterBackoff) and retry.attempt == 2
    saga.now = retry.not_before
    started = saga.claim("hold_flight")
    assert started.operation_key == key  # never a new key per attempt


# Row 1 (non-deduping tool): the email provider cannot dedupe, so absence is only trusted
# after its commit horizon.
def test_absent_non_deduping_tool_waits_out_commit_horizon_before_retry() -> None:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.run_ok("hold_flight")
    saga.run_ok("hold_hotel")
    saga.record()
    saga.run_ok("capture_payment")
    saga.record()
    saga.claim("send_itinerary")
    unknown_at = saga.now
    saga.unknown("send_itinerary")
    saga.record()
    saga.lookup("send_itinerary", "absent")  # right away: proves nothing yet
    (wait,) = saga.record()
    assert isinstance(wait, Reconcile)
    assert wait.not_before == unknown_at + timedelta(seconds=120)
    saga.now = wait.not_before
    saga.lookup("send_itinerary", "absent")
    (retry,) = saga.record()
    assert isinstance(retry, RetryAfterBackoff) and retry.reason.endswith("commit horizon")


# Row 2: timeout after the provider committed -> reuse the key and find the receipt.
def test_timeout_after_commit_is_found_by_key_not_retried() -> None:
    saga = _flight_in_flight()
    saga.unknown("hold_flight")
    saga.record()
    saga.lookup("hold_flight", "found", receipt=RECEIPTS["hold_flight"])
    (accept,) = saga.record()
    assert accept == AcceptReconciledReceipt(
        "hold_flight", F, 1, saga.state.run("hold_flight", F).operation_key, RECEIPTS["hold_flight"]
    )
    assert saga.state.run("hold_flight", F).via == "reconcile"
    assert saga.state.run("hold_flight", F).attempt == 1  # no second attempt was ever made


# Row 3: worker crashes after the external success, before persisting the receipt.
def test_crash_after_success_recovers_from_persisted_intent() -> None:
    saga = _flight_in_flight()
    intent = saga.state.run("hold_flight", F)
    assert saga.record() == []  # lease still valid: wait
    saga.tick(31)
    (declared,) = saga.record()
    assert isinstance(declared, DeclareOutcomeUnknown)
    assert declared.operation_key == intent.operation_key  # the key from the intent record
    (reconcile,) = saga.record()
    assert isinstance(reconcile, Reconcile)
    saga.lookup("hold_flight", "found", receipt=RECEIPTS["hold_flight"])
    saga.record()
    assert saga.state.run("hold_flight", F).status == "succeeded"


def test_still_unknown_backs_off_then_escalates_with_evidence() -> None:
    saga = _flight_in_flight()
    saga.unknown("hold_flight")
    seen = []
    for _ in range(10):
        batch = saga.record()
        if not batch or isinstance(batch[0], Escalate):
            break
        seen.append(batch[0])
        saga.now = max(saga.now, batch[0].not_before)  # type: ignore[attr-defined]
        saga.lookup("hold_flight", "unknown")
    assert len(seen) == 5  # max_reconciliations
    assert all(b.not_before <= a.not_before for b, a in zip(seen, seen[1:], strict=False))
    assert saga.state.status is SagaStatus.MANUAL_INTERVENTION
    escalation = saga.events[-1]
    evidence = escalation.evidence  # type: ignore[attr-defined]
    assert evidence.intended_action == "forward hold_flight: flights.hold@1"
    assert evidence.reason.startswith("outcome unknown: still unproven after 5 lookups")
    assert evidence.deadline is not None and evidence.alternatives
    assert evidence.residual_risk and evidence.expected_result
    assert saga.record() == []  # paused


# Row 4: the model replans the same business action.
def test_replanned_action_maps_to_the_same_operation_key() -> None:
    catalogue = trip_tool_catalogue()
    hold = PlannedAction(tool="flights.hold", args={"flight_id": "LH1", "passenger_email": "a@b"})
    plan_a = AgentPlan(actions=[hold])
    other = PlannedAction(
        tool="hotels.hold", args={"hotel_id": "H", "nights": 1, "guest_email": "a@b"}
    )
    plan_b = AgentPlan(actions=[other, hold.model_copy()])  # replanned: new position
    step_a = validate_plan(plan_a, catalogue).steps[0]
    step_b = validate_plan(plan_b, catalogue).steps[1]
    assert step_a.id == step_b.id
    key = lambda s: operation_key("saga-7", s.id, F, s.operation_version)  # noqa: E731
    assert key(step_a) == key(step_b)


def test_same_key_with_a_different_payload_is_rejected_loudly() -> None:
    key = operation_key("saga-1", "hold_flight", F, 1)
    first = payload_hash({"flight_id": "LH123"})
    check_key_payload(first, first, key)  # same payload: fine
    check_key_payload(None, first, key)  # nothing recorded yet: fine
    with pytest.raises(KeyReuseError, match=key):
        check_key_payload(first, payload_hash({"flight_id": "LH999"}), key)


# Row 5: a compensation times out.
def test_compensation_timeout_is_unknown_then_reconciled_with_its_own_key() -> None:
    saga = _compensating_flight()
    saga.claim("hold_flight", C)
    saga.unknown("hold_flight", C)
    (reconcile,) = saga.record()
    assert reconcile == Reconcile("hold_flight", C, 1, saga.now, "outcome unknown")
    assert saga.state.status is SagaStatus.COMPENSATING  # never "fixed" on a timeout
    saga.lookup("hold_flight", "absent", kind=C)
    (retry,) = saga.record()
    assert isinstance(retry, RetryAfterBackoff) and retry.kind is C and retry.attempt == 2
    saga.now = retry.not_before
    again = saga.claim("hold_flight", C)
    assert again.operation_key == operation_key("saga-1", "hold_flight", C, 1)
    saga.unknown("hold_flight", C)
    saga.record()
    saga.lookup("hold_flight", "found", kind=C, receipt=Receipt(resource_id="REL-1"))
    saga.settle()
    assert saga.state.status is SagaStatus.COMPENSATED


# Row 6: the target changed after the forward step -> stop and ask a human.
@pytest.mark.parametrize(
    ("action", "final"),
    [("mark_compensated", SagaStatus.COMPENSATED), ("skip", SagaStatus.PARTIALLY_COMPENSATED)],
)
def test_target_changed_escalates_then_operator_resolves(action: str, final: SagaStatus) -> None:
    saga = _compensating_flight()
    saga.claim("hold_flight", C)
    saga.fail("hold_flight", ErrorClass.PRECONDITION_FAILED, kind=C, msg="hold version is 4")
    (escalate,) = saga.record()
    assert isinstance(escalate, Escalate) and escalate.kind is C
    assert escalate.reason.startswith("target changed")
    assert escalate.evidence.affected_resource == "FH-1"
    assert escalate.evidence.forward_receipt == RECEIPTS["hold_flight"]
    assert "mark_compensated" in escalate.evidence.alternatives
    assert saga.record() == []
    saga.append(
        OperatorAction(
            at=saga.now,
            action=action,
            step_id="hold_flight",
            kind=C,
            actor="op",  # type: ignore[arg-type]
            evidence={"ticket": "OPS-1"},
        )
    )
    (finish,) = saga.record()
    assert finish.state is final  # type: ignore[attr-defined]


# Row 7: an irreversible action already happened -> correction, honest terminal state.
def _announce_catalogue() -> ToolCatalogue:
    return ToolCatalogue(
        tools=[
            ToolSpec(
                name="hold",
                semantics=Semantics.COMPENSABLE,
                dedupes_by_key=True,
                commit_horizon_s=10,
                receipt_fields=["x"],
            ),
            ToolSpec(name="release", semantics=Semantics.IDEMPOTENT_BY_KEY, dedupes_by_key=True),
            ToolSpec(name="notify", semantics=Semantics.IRREVERSIBLE, receipt_fields=["to"]),
            ToolSpec(name="correct", semantics=Semantics.IRREVERSIBLE),
            ToolSpec(name="book", semantics=Semantics.COMPENSABLE, dedupes_by_key=True),
        ]
    )


def _announce_definition() -> SagaDefinition:
    """hold -> {notify (irreversible, last, correction), book (parallel, can be rejected)}."""
    release = CompensationCommand(tool="release", args={"id": "${receipt.resource_id}"})
    steps = [
        StepDefinition(
            id="hold", tool="hold", semantics=Semantics.COMPENSABLE, compensation=release
        ),
        StepDefinition(
            id="notify",
            tool="notify",
            semantics=Semantics.IRREVERSIBLE,
            depends_on=["hold"],
            compensation=CompensationCommand(tool="correct", args={"to": "${receipt.to}"}),
        ),
        StepDefinition(
            id="book",
            tool="book",
            semantics=Semantics.COMPENSABLE,
            depends_on=["hold"],
            compensation=release,
        ),
    ]
    return validate_definition(
        SagaDefinition(name="announce", version=1, steps=steps), _announce_catalogue()
    )


def test_irreversible_effect_gets_a_correction_and_partial_compensation() -> None:
    saga = Saga(_announce_definition())
    saga.record()
    saga.run_ok("hold")
    assert kinds(saga.record()) == ["ScheduleStep", "ScheduleStep"]
    saga.run_ok("notify")  # the message is out
    saga.claim("book")
    saga.fail("book", ErrorClass.BUSINESS_REJECTION)
    saga.record()
    # the correction runs first (notify depends on hold), then the hold is released
    assert saga.record() == [ScheduleCompensation("notify", 1, saga.now, "dependents compensated")]
    saga.run_ok("notify", C)
    assert [d.step_id for d in saga.record()] == ["hold"]  # type: ignore[attr-defined]
    saga.run_ok("hold", C)
    (finish,) = saga.record()
    assert finish.state is SagaStatus.PARTIALLY_COMPENSATED  # type: ignore[attr-defined]
    assert "notify (irreversible, corrected)" in finish.summary  # type: ignore[attr-defined]


# Row 8: authorization expires during recovery -> pause, renewed approval, same context.
def test_auth_expired_during_compensation_pauses_for_renewed_approval() -> None:
    saga = _compensating_flight()
    saga.claim("hold_flight", C)
    saga.fail("hold_flight", ErrorClass.AUTH_EXPIRED, kind=C, msg="token expired")
    (request,) = saga.record()
    assert isinstance(request, RequestApproval) and request.scope == "renew_authorization"
    assert request.evidence.reason == "authorization expired"
    assert saga.record() == []  # paused: old authority is never reused
    assert isinstance(saga.events[-1], ApprovalRequested)
    grant = check_approval(
        saga.state, "hold_flight", C, request.action_hash, person("ops-lead"), saga.now
    )
    assert grant is not None
    saga.append(grant)
    (resume,) = saga.record()
    assert resume == ScheduleCompensation("hold_flight", 2, saga.now, "approved")
    assert saga.claim("hold_flight", C).operation_key == operation_key(
        "saga-1", "hold_flight", C, 1
    )
    saga.succeed("hold_flight", C)
    saga.record()
    assert saga.state.status is SagaStatus.COMPENSATED


def test_a_renewal_nobody_answers_is_asked_again_as_a_renewal() -> None:
    # found by the mutation run (issue 36): decide.py:486 survived every test
    saga = _compensating_flight()
    saga.claim("hold_flight", C)
    saga.fail("hold_flight", ErrorClass.AUTH_EXPIRED, kind=C, msg="token expired")
    (request,) = saga.record()
    assert request.scope == "renew_authorization"  # type: ignore[attr-defined]
    saga.now = request.expires_at  # type: ignore[attr-defined]
    (again,) = saga.record()
    assert isinstance(again, RequestApproval) and again.scope == "renew_authorization"
    assert again.evidence.reason == "approval expired"
