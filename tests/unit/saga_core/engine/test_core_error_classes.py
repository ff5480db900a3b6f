"""Error classes drive the choice: retry with backoff, compensate, re-approve or escalate."""

from __future__ import annotations

from datetime import timedelta

from core_harness import F, Saga, kinds, trip_input

from saga_core import (
    CompensationCommand,
    ErrorClass,
    Escalate,
    OperatorAction,
    RetryAfterBackoff,
    RetryPolicy,
    SagaDefinition,
    SagaStatus,
    Semantics,
    StepDefinition,
    ToolCatalogue,
    ToolSpec,
    backoff_delay,
    jitter_fraction,
    validate_definition,
)
from sagafleet.example_sagas import trip_definition


def test_transient_failure_retries_same_key_with_deterministic_capped_backoff() -> None:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.claim("hold_flight")
    key = saga.state.run("hold_flight", F).operation_key
    saga.fail("hold_flight", ErrorClass.TRANSIENT)
    (retry,) = saga.record()
    assert isinstance(retry, RetryAfterBackoff) and retry.attempt == 2
    policy = trip_definition().retry_policy("hold_flight", F)
    assert retry.not_before == saga.now + backoff_delay(policy, key, 1)
    assert saga.state.retry_budget_left == 9
    assert saga.record() == []  # not repeated


def test_backoff_is_full_jitter_below_the_exponential_cap() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay_s=1.0, max_delay_s=8.0)
    delays = [backoff_delay(policy, "k", attempt) for attempt in range(1, 12)]
    caps = [min(8.0, 2 ** (a - 1)) for a in range(1, 12)]
    assert all(timedelta(0) <= d < timedelta(seconds=c) for d, c in zip(delays, caps, strict=True))
    assert backoff_delay(policy, "k", 3) == backoff_delay(policy, "k", 3)
    fractions = {jitter_fraction(f"key-{i}", 1) for i in range(200)}
    assert len(fractions) == 200 and 0.3 < sum(fractions) / 200 < 0.7


def test_transient_attempts_exhausted_before_pivot_compensates() -> None:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.run_ok("hold_hotel")
    for _ in range(4):  # max_attempts = 4 for hold_flight
        saga.claim("hold_flight")
        saga.fail("hold_flight", ErrorClass.TRANSIENT)
        batch = saga.record()
        if isinstance(batch[0], RetryAfterBackoff):
            saga.now = batch[0].not_before
    assert kinds(batch) == ["BeginCompensation"]
    assert saga.state.run("hold_flight", F).attempt == 4


def test_retry_budget_exhausted_escalates() -> None:
    saga = Saga(trip_definition(), trip_input(), retry_budget=0)
    saga.record()
    saga.claim("hold_flight")
    saga.fail("hold_flight", ErrorClass.TRANSIENT)
    (escalate,) = saga.record()
    assert isinstance(escalate, Escalate) and "retry budget exhausted" in escalate.reason
    # resume refills the budget; the retry then happens with the same key
    saga.append(OperatorAction(at=saga.now, action="resume", step_id="hold_flight", actor="op"))
    assert kinds(saga.record()) == ["RetryAfterBackoff"]


def test_permanent_failure_escalates_and_operator_retry_ends_committed_with_repair() -> None:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.run_ok("hold_flight")
    saga.claim("hold_hotel")
    saga.fail("hold_hotel", ErrorClass.PERMANENT, msg="bad hotel config")
    (escalate,) = saga.record()
    assert isinstance(escalate, Escalate) and escalate.step_id == "hold_hotel"
    assert "cancel" in escalate.evidence.alternatives
    saga.append(OperatorAction(at=saga.now, action="retry_step", step_id="hold_hotel", actor="op"))
    assert kinds(saga.record()) == ["ScheduleStep"]
    saga.run_ok("hold_hotel")
    saga.record()
    saga.run_ok("capture_payment")
    saga.record()
    saga.run_ok("send_itinerary")
    saga.record()
    assert saga.state.status is SagaStatus.COMMITTED_WITH_REPAIR


def _post_pivot_definition() -> SagaDefinition:
    catalogue = ToolCatalogue(
        tools=[
            ToolSpec(name="hold", semantics=Semantics.COMPENSABLE, dedupes_by_key=True),
            ToolSpec(name="release", semantics=Semantics.IDEMPOTENT_BY_KEY, dedupes_by_key=True),
            ToolSpec(name="commit", semantics=Semantics.IRREVERSIBLE),
            ToolSpec(name="fulfil", semantics=Semantics.IDEMPOTENT_BY_KEY, dedupes_by_key=True),
        ]
    )
    steps = [
        StepDefinition(
            id="hold",
            tool="hold",
            semantics=Semantics.COMPENSABLE,
            compensation=CompensationCommand(tool="release"),
        ),
        StepDefinition(
            id="commit",
            tool="commit",
            semantics=Semantics.IRREVERSIBLE,
            pivot=True,
            depends_on=["hold"],
        ),
        StepDefinition(
            id="fulfil",
            tool="fulfil",
            semantics=Semantics.IDEMPOTENT_BY_KEY,
            depends_on=["commit"],
            retry=RetryPolicy(max_attempts=2, max_delay_s=5),
        ),
    ]
    return validate_definition(SagaDefinition(name="pp", version=1, steps=steps), catalogue)


def test_business_rejection_after_pivot_retries_forward_then_escalates_never_compensates() -> None:
    saga = Saga(_post_pivot_definition())
    saga.record()
    saga.run_ok("hold")
    saga.record()
    saga.run_ok("commit")
    saga.record()
    saga.claim("fulfil")
    saga.fail("fulfil", ErrorClass.BUSINESS_REJECTION)
    (retry,) = saga.record()
    assert isinstance(retry, RetryAfterBackoff)
    saga.now = retry.not_before
    saga.claim("fulfil")
    saga.fail("fulfil", ErrorClass.BUSINESS_REJECTION)
    (escalate,) = saga.record()
    assert isinstance(escalate, Escalate) and "cancel" not in escalate.evidence.alternatives
    assert saga.state.phase == "forward"
    # the operator skips the step: the saga is committed, honestly with repair
    saga.append(OperatorAction(at=saga.now, action="skip", step_id="fulfil", actor="op"))
    (finish,) = saga.record()
    assert finish.state is SagaStatus.COMMITTED_WITH_REPAIR  # type: ignore[attr-defined]
    assert "fulfil" in finish.summary  # type: ignore[attr-defined]
