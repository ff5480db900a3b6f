"""The in-memory trip tools keep a provider's promises: dedupe, lookup, faults, ledgers."""

from __future__ import annotations

import pytest

from saga_core.contracts import ErrorClass, Receipt
from sagafleet.testing.clock import TestClock
from sagafleet.testing.tools import UnknownFault
from sagafleet.testing.trip import TripTools
from workers.tools import Absent, ToolError, Unknown

HOLD = {"saga_id": "s1", "flight_id": "FL1", "passenger_email": "ada@example.com"}


@pytest.fixture
def clock() -> TestClock:
    return TestClock()


@pytest.fixture
def tools(clock: TestClock) -> TripTools:
    return TripTools(clock)


def test_a_repeated_key_replays_the_stored_receipt_and_makes_one_hold(tools: TripTools) -> None:
    first = tools["flights.hold"].execute(HOLD, "k1")
    again = tools["flights.hold"].execute(HOLD, "k1")
    assert first == again
    assert tools.ledger("s1").flight_holds == 1
    assert tools["flights.hold"].lookup("k1") == first


def test_a_key_reused_with_another_payload_is_refused(tools: TripTools) -> None:
    tools["flights.hold"].execute(HOLD, "k1")
    with pytest.raises(ToolError) as refused:
        tools["flights.hold"].execute({**HOLD, "flight_id": "FL2"}, "k1")
    assert refused.value.error_class is ErrorClass.PERMANENT
    assert "different request" in refused.value.message


def test_email_does_not_dedupe_as_the_catalogue_says(tools: TripTools) -> None:
    mail = {"saga_id": "s1", "to": "ada@example.com"}
    first = tools["email.send_itinerary"].execute(mail, "k1")
    tools["email.send_itinerary"].execute(mail, "k1")
    assert tools.ledger("s1").itineraries_sent == 2  # a second real email
    assert tools["email.send_itinerary"].lookup("k1") == first
    assert [e.key for e in tools.duplicate_effects()] == ["k1"]


def test_timeout_before_dispatch_commits_nothing(tools: TripTools) -> None:
    tools.fail_next("flights.hold", "timeout_before_dispatch")
    with pytest.raises(ToolError) as timed_out:
        tools["flights.hold"].execute(HOLD, "k1")
    assert timed_out.value.error_class is ErrorClass.AMBIGUOUS
    assert isinstance(tools["flights.hold"].lookup("k1"), Absent)
    tools["flights.hold"].execute(HOLD, "k1")  # the fault fired once
    assert tools.ledger("s1").flight_holds == 1


def test_fail_before_commit_is_transient_and_commits_nothing(tools: TripTools) -> None:
    tools.fail_next("flights.hold", "fail_before_commit")
    with pytest.raises(ToolError) as failed:
        tools["flights.hold"].execute(HOLD, "k1")
    assert failed.value.error_class is ErrorClass.TRANSIENT
    assert tools.ledger("s1").flight_holds == 0


def test_commit_then_timeout_loses_the_response_but_lookup_finds_it(tools: TripTools) -> None:
    tools.fail_next("flights.hold", "commit_then_timeout")
    with pytest.raises(ToolError) as lost:
        tools["flights.hold"].execute(HOLD, "k1")
    assert lost.value.error_class is ErrorClass.AMBIGUOUS
    assert isinstance(tools["flights.hold"].lookup("k1"), Receipt)
    assert tools.ledger("s1").flight_holds == 1


def test_slow_visibility_hides_the_effect_from_lookup_until_the_clock_moves(
    tools: TripTools, clock: TestClock
) -> None:
    tools.fail_next("flights.hold", "slow_visibility", delay_s=5)
    tools["flights.hold"].execute(HOLD, "k1")
    assert isinstance(tools["flights.hold"].lookup("k1"), Absent)
    clock.advance(5)
    assert isinstance(tools["flights.hold"].lookup("k1"), Receipt)


def test_business_rejection_and_lookup_unavailable(tools: TripTools) -> None:
    tools.fail_next("payments.capture", "business_rejection")
    with pytest.raises(ToolError) as rejected:
        tools["payments.capture"].execute(
            {"saga_id": "s1", "amount": 100, "currency": "EUR", "card_token": "tok"}, "k1")
    assert rejected.value.error_class is ErrorClass.BUSINESS_REJECTION
    tools.fail_next("payments.capture", "lookup_unavailable")
    assert isinstance(tools["payments.capture"].lookup("k1"), Unknown)


def test_compensation_failure_is_transient_or_permanent(tools: TripTools) -> None:
    hold = tools["flights.hold"].execute(HOLD, "k1")
    release = {"saga_id": "s1", "hold_id": hold.resource_id, "expect_version": 1}
    tools.fail_next("flights.release", "compensation_failure")
    tools.fail_next("flights.release", "compensation_failure", error_class="permanent")
    classes = []
    for _ in range(2):
        with pytest.raises(ToolError) as failed:
            tools["flights.release"].execute(release, "r1")
        classes.append(failed.value.error_class)
    assert classes == [ErrorClass.TRANSIENT, ErrorClass.PERMANENT]
    assert tools.ledger("s1").active_flight_holds == 1


def test_target_changed_fails_the_release_on_its_version_precondition(tools: TripTools) -> None:
    hold = tools["flights.hold"].execute(HOLD, "k1")
    tools.fail_next("flights.release", "target_changed")
    with pytest.raises(ToolError) as changed:
        tools["flights.release"].execute(
            {"saga_id": "s1", "hold_id": hold.resource_id, "expect_version": 1}, "r1")
    assert changed.value.error_class is ErrorClass.PRECONDITION_FAILED


def test_a_fault_scoped_to_a_saga_leaves_other_sagas_alone(tools: TripTools) -> None:
    tools.fail_next("flights.hold", "fail_before_commit", saga_id="s2")
    tools["flights.hold"].execute(HOLD, "k1")
    with pytest.raises(ToolError):
        tools["flights.hold"].execute({**HOLD, "saga_id": "s2"}, "k2")


def test_arming_an_unknown_tool_or_fault_names_what_exists(tools: TripTools) -> None:
    with pytest.raises(UnknownFault, match="flights.hold"):
        tools.fail_next("flights.hodl", "fail_before_commit")
    with pytest.raises(UnknownFault, match="known faults"):
        tools.fail_next("flights.hold", "meteor_strike")
    with pytest.raises(UnknownFault, match="no target"):
        tools.fail_next("flights.hold", "target_changed")


def test_a_refund_offsets_the_charge_and_the_ledger_sees_it_unwound(tools: TripTools) -> None:
    charge = tools["payments.capture"].execute(
        {"saga_id": "s1", "amount": 100, "currency": "EUR", "card_token": "tok"}, "k1")
    tools["payments.refund"].execute(
        {"saga_id": "s1", "capture_id": charge.resource_id, "amount": 100, "currency": "EUR"},
        "r1")
    ledger = tools.ledger("s1")
    assert (ledger.captured, ledger.refunded, ledger.net_charge) == (100, 100, 0)
    assert ledger.is_unwound and not ledger.duplicates
