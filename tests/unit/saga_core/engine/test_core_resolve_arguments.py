"""resolve_arguments (decide's and the gate checks' short path) agrees with resolve_command."""

from __future__ import annotations

from core_harness import C, F, Saga, trip_input

from saga_core import ErrorClass, RunStatus, resolve_arguments, resolve_command
from sagafleet.example_sagas import trip_definition


def compared_scheduled_runs(saga: Saga) -> int:
    """Check the two agree on every scheduled run of the saga; how many were compared."""
    compared = 0
    for run in [*saga.state.forward.values(), *saga.state.compensation.values()]:
        if run.status is RunStatus.SCHEDULED:
            command = resolve_command(saga.state, run.step_id, run.kind)
            assert resolve_arguments(saga.state, run.step_id, run.kind) == command.args
            compared += 1
    return compared


def test_arguments_alone_are_the_commands_arguments_forward_and_compensation() -> None:
    # given a trip whose holds are scheduled
    trip = Saga(trip_definition(), trip_input())
    trip.record()
    compared = compared_scheduled_runs(trip)
    # when both holds succeed, the payment (templated over their receipts) is scheduled
    trip.run_ok("hold_flight")
    trip.run_ok("hold_hotel")
    trip.record()
    compared += compared_scheduled_runs(trip)
    # and when the payment is declined, the releases are scheduled
    trip.claim("capture_payment")
    trip.fail("capture_payment", ErrorClass.BUSINESS_REJECTION, msg="declined")
    trip.settle()
    compared += compared_scheduled_runs(trip)
    # then every scheduled run, forward and compensation, resolved to the same arguments
    assert trip.state.run("capture_payment", F).status is RunStatus.FAILED
    assert trip.state.run("hold_flight", C).status is RunStatus.SCHEDULED
    assert compared >= 4
