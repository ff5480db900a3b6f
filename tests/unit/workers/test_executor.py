"""The step executor on a TestFleet's in-memory log (no servers): claim by stream version,
call the tool with the operation key, record the result; drop what is stale, reconcile what
is in doubt, and claim due siblings ahead when asked."""

from __future__ import annotations

from datetime import timedelta

from application.messages import StepCommand
from saga_core import resolve_command
from saga_core.contracts import StepKind
from saga_core.engine.events import (
    ReconciliationResult,
    StepOutcomeUnknown,
    StepStarted,
    StepSucceeded,
)
from saga_core.engine.state import RunStatus
from sagafleet.testing import Fault, TestFleet
from workers.executor import Claimed, StepOutcome

TRIP_INPUT = {
    "customer_email": "ada@example.com", "flight_id": "FL1", "hotel_id": "HT1", "nights": 1,
    "amount": 10_000, "currency": "EUR", "card_token": "tok_4242",
}


def _started_trip(fleet: TestFleet) -> tuple[str, StepCommand]:
    """A started trip and the one wake-up its start published."""
    saga_id = str(fleet.client().start("trip", TRIP_INPUT, key="k").saga_id)
    command = fleet.publisher.take()
    assert command is not None and len(fleet.publisher) == 0
    return saga_id, command


def test_handle_claims_calls_with_the_operation_key_and_records_the_receipt() -> None:
    # given a started trip and the wake-up for its first hold
    fleet = TestFleet()
    saga_id, command = _started_trip(fleet)
    before = fleet.state(saga_id)
    # when the executor handles it
    outcome = fleet.executor.handle(command)
    # then the claim was committed first, then the receipt, both under the step's key
    assert outcome.verdict == "executed" and outcome.reason == "StepSucceeded"
    claim, result = [e for e in fleet.events(saga_id)
                     if isinstance(e, StepStarted | StepSucceeded)
                     and e.step_id == command.step_id]
    key = resolve_command(before, command.step_id, command.kind).operation_key
    assert isinstance(claim, StepStarted) and claim.worker_id == "testfleet"
    assert isinstance(result, StepSucceeded) and claim.operation_key == result.operation_key == key
    # and the tool committed exactly one effect under that key
    tool = before.definition.tool_for(command.step_id, command.kind)[0]
    assert [effect.key for effect in fleet.tools.effects_of(tool, saga_id)] == [key]


def test_a_duplicate_wake_up_is_dropped_and_calls_nothing() -> None:
    # given a command already handled
    fleet = TestFleet()
    saga_id, command = _started_trip(fleet)
    fleet.executor.handle(command)
    version = fleet.state(saga_id).version
    effects = len(fleet.tools.effects)
    # when its message comes again
    again = fleet.executor.handle(command)
    # then it is dropped: nothing recorded, no tool called
    assert again.verdict == "dropped" and again.committed is None
    assert fleet.state(saga_id).version == version and len(fleet.tools.effects) == effects


def test_a_command_for_an_unknown_saga_or_step_is_dropped_by_name() -> None:
    fleet = TestFleet()
    saga_id, command = _started_trip(fleet)
    unknown_saga = command.model_copy(update={"saga_id": "no-such-saga"})
    unknown_step = command.model_copy(update={"step_id": "no_such_step"})
    assert fleet.executor.handle(unknown_saga) == StepOutcome(unknown_saga, "dropped",
                                                               "unknown saga")
    assert fleet.executor.handle(unknown_step) == StepOutcome(unknown_step, "dropped",
                                                               "unknown step")


def test_claiming_ahead_takes_the_due_siblings_in_the_same_append() -> None:
    # given a trip whose two holds are due, woken by one message
    fleet = TestFleet()
    saga_id, command = _started_trip(fleet)
    loaded = fleet.log.load(saga_id)
    # when the executor claims the one woken, asking to claim ahead
    claimed = fleet.executor.claim(command, ahead=fleet.executor.claim_ahead)
    # then the sibling hold is claimed in the same commit, for this worker
    assert isinstance(claimed, Claimed)
    [sibling] = claimed.committed.claimed
    assert {command.step_id, sibling.step_id} == {"hold_flight", "hold_hotel"}
    assert claimed.committed.loaded.version == loaded.version + 2
    run = claimed.committed.state.run(sibling.step_id, sibling.kind)
    assert run.status is RunStatus.STARTED and run.worker_id == "testfleet"
    # and what the sibling's claim resolved is what running it sends
    assert fleet.executor.resolution(sibling, claimed.committed.loaded) == resolve_command(
        loaded.state, sibling.step_id, sibling.kind)


def test_without_claiming_ahead_the_claim_takes_only_its_own_step() -> None:
    fleet = TestFleet()
    saga_id, command = _started_trip(fleet)
    claimed = fleet.executor.claim(command)
    assert isinstance(claimed, Claimed) and claimed.committed.claimed == ()
    assert claimed.committed.loaded.version == fleet.log.load(saga_id).version


def _claimed_then_lease_ran_out(fleet: TestFleet, fault: Fault | None = None):
    """A claim whose tool was called (meeting ``fault``), after which its lease ran out and
    the sweeper's ruling on it was recorded; the command, the call's result, the claim."""
    saga_id, command = _started_trip(fleet)
    claimed = fleet.executor.claim(command)
    assert isinstance(claimed, Claimed)
    if fault is not None:
        tool = claimed.resolved.tool
        fleet.tools.fail_next(tool, fault)
    result = fleet.executor.call(command, claimed.resolved, claimed.committed.loaded)
    fleet.clock.advance((fleet.executor.lease + timedelta(seconds=1)).total_seconds())
    fleet.orchestrator.advance(saga_id)
    ruled = fleet.state(saga_id).run(command.step_id, command.kind)
    assert ruled.status is not RunStatus.STARTED
    return saga_id, command, result, claimed.committed.loaded


def test_a_receipt_is_recorded_even_after_the_workers_lease_ran_out() -> None:
    # given a call that succeeded while its claim's lease ran out
    fleet = TestFleet()
    saga_id, command, result, loaded = _claimed_then_lease_ran_out(fleet)
    assert isinstance(result, StepSucceeded)
    # when the late worker records it, then the receipt is a fact and is recorded
    committed = fleet.executor.record(command, result, loaded)
    assert committed is not None and committed.events[0] == result
    assert fleet.state(saga_id).version == committed.loaded.version


def test_any_other_result_from_a_claim_no_longer_held_is_dropped() -> None:
    # given a call that failed while its claim's lease ran out
    fleet = TestFleet()
    saga_id, command, result, loaded = _claimed_then_lease_ran_out(
        fleet, Fault.FAIL_BEFORE_COMMIT)
    assert not isinstance(result, StepSucceeded)
    version = fleet.state(saga_id).version
    # when the late worker records it, then nothing is recorded: the claim is not its own
    assert fleet.executor.record(command, result, loaded) is None
    assert fleet.state(saga_id).version == version


def test_an_operation_in_doubt_is_reconciled_by_its_key() -> None:
    # given a hold whose response was lost after the provider committed it
    fleet = TestFleet()
    saga_id, command = _started_trip(fleet)
    tool = fleet.state(saga_id).definition.tool_for(command.step_id, command.kind)[0]
    fleet.tools.fail_next(tool, Fault.COMMIT_THEN_TIMEOUT)
    first = fleet.executor.handle(command)
    assert first.reason == StepOutcomeUnknown.__name__
    # when the lookup the log schedules is run
    [lookup] = [c for c in first.follow_ups if c.step_id == command.step_id]
    fleet.clock.advance(60)
    outcome = fleet.executor.handle(lookup)
    # then the receipt is found under the same key, and the step counts as done
    assert outcome.verdict == "reconciled" and outcome.reason == "found"
    [answer] = [e for e in fleet.events(saga_id) if isinstance(e, ReconciliationResult)]
    assert answer.receipt is not None
    assert fleet.state(saga_id).run(command.step_id, StepKind.FORWARD).status in {
        RunStatus.SUCCEEDED, RunStatus.VERIFYING}
