"""Compensations: version preconditions, idempotency by their own key, refunds as offsets."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from saga_core.contracts import ErrorClass, Receipt
from sagafleet.sandbox import Boundary, TripSandbox, ledger_for_saga
from workers.tools import ToolError

SAGA = "saga-c"


def hold_hotel(trip: TripSandbox, key: str = "hh-1") -> Receipt:
    args = {"saga_id": SAGA, "hotel_id": "H-OSLO", "nights": 2}
    return trip.registry.get("hotels.hold", 1).execute(args, key)


def capture(trip: TripSandbox, amount: int = 50_000) -> Receipt:
    args = {"saga_id": SAGA, "amount": amount, "currency": "NOK", "card_token": "tok_4000"}
    return trip.registry.get("payments.capture", 1).execute(args, "cap-1")


def refund_args(charge: Receipt, amount: int | None = None) -> dict[str, Any]:
    return {
        "saga_id": SAGA,
        "charge_id": charge.resource_id,
        "amount": charge.fields["amount"] if amount is None else amount,
        "expected_version": charge.version,
    }


def test_release_bumps_the_version_and_is_idempotent_by_its_own_key(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a hotel hold
    hold = hold_hotel(trip)
    release = trip.registry.get("hotels.release", 1)
    args = {"saga_id": SAGA, "hold_id": hold.resource_id, "expected_version": hold.version}
    # when it is released, and the release is repeated with the same key
    first = release.execute(args, "hh-1-release")
    again = release.execute(args, "hh-1-release")
    # then both answers are the one release, at version 2, and nothing is held
    assert first == again
    assert (first.resource_id, first.version, first.status) == (hold.resource_id, 2, "released")
    assert ledger_for_saga(sandbox_db, SAGA).active_hotel_holds == 0
    # and a release under another key with the stale version is a failed precondition
    with pytest.raises(ToolError) as raised:
        release.execute(args, "someone-elses-release")
    assert raised.value.error_class is ErrorClass.PRECONDITION_FAILED
    assert raised.value.details["actual_version"] == 2


def test_a_changed_target_fails_the_release_precondition(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a flight hold, then someone else changes it just before the release
    receipt = trip.registry.get("flights.hold", 1).execute(
        {"saga_id": SAGA, "flight_id": "AF10", "customer_email": "x@example.com"}, "fh-1"
    )
    trip.faults.add("flights", "release", Boundary.TARGET_CHANGED, count=1)
    release = trip.registry.get("flights.release", 1)
    args = {"saga_id": SAGA, "hold_id": receipt.resource_id, "expected_version": 1}
    # when the saga compensates
    with pytest.raises(ToolError) as raised:
        release.execute(args, "fh-1-release")
    # then it stops with PreconditionFailed and leaves the changed hold alone
    assert raised.value.error_class is ErrorClass.PRECONDITION_FAILED
    assert raised.value.details["expected_version"] == 1
    assert raised.value.details["actual_version"] == 2
    assert ledger_for_saga(sandbox_db, SAGA).active_flight_holds == 1


def test_a_changed_charge_fails_the_refund_precondition(trip: TripSandbox, sandbox_db: str) -> None:
    charge = capture(trip)
    trip.faults.add("payments", "refund", Boundary.TARGET_CHANGED, count=1)
    with pytest.raises(ToolError) as raised:
        trip.registry.get("payments.refund", 1).execute(refund_args(charge), "cap-1-refund")
    assert raised.value.error_class is ErrorClass.PRECONDITION_FAILED
    assert ledger_for_saga(sandbox_db, SAGA).refunded == 0


def test_a_refund_offsets_the_charge_and_history_remains(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a captured charge
    charge = capture(trip, 50_000)
    refund = trip.registry.get("payments.refund", 1)
    # when it is refunded, twice with the same key
    first = refund.execute(refund_args(charge), "cap-1-refund")
    assert refund.execute(refund_args(charge), "cap-1-refund") == first
    # then the net charge is zero, the charge row is kept as refunded, one refund row exists
    ledger = ledger_for_saga(sandbox_db, SAGA)
    assert (ledger.captured, ledger.refunded, ledger.net_charge) == (50_000, 50_000, 0)
    assert first.status == "refunded" and first.fields["charge_id"] == charge.resource_id
    with psycopg.connect(sandbox_db) as conn:
        rows = conn.execute(
            "SELECT c.status, c.version, count(r.*) FROM sandbox_payments.charges c"
            " JOIN sandbox_payments.refunds r USING (charge_id) GROUP BY c.status, c.version"
        ).fetchall()
    assert rows == [("refunded", 2, 1)]


def test_refunding_more_than_was_captured_is_permanent(trip: TripSandbox) -> None:
    charge = capture(trip, 1_000)
    with pytest.raises(ToolError) as raised:
        trip.registry.get("payments.refund", 1).execute(refund_args(charge, 1_001), "over")
    assert raised.value.error_class is ErrorClass.PERMANENT
    assert raised.value.details["refundable"] == 1_000


def test_compensating_a_missing_or_foreign_resource_is_permanent(trip: TripSandbox) -> None:
    release = trip.registry.get("hotels.release", 1)
    missing = {"saga_id": SAGA, "hold_id": "hh_nope", "expected_version": 1}
    with pytest.raises(ToolError) as raised:
        release.execute(missing, "rel-missing")
    assert raised.value.error_class is ErrorClass.PERMANENT
    hold = hold_hotel(trip)
    foreign = {"saga_id": "another-saga", "hold_id": hold.resource_id, "expected_version": 1}
    with pytest.raises(ToolError) as raised:
        release.execute(foreign, "rel-foreign")
    assert raised.value.error_class is ErrorClass.PERMANENT
    assert raised.value.details["code"] == "forbidden"


def test_an_itinerary_cannot_be_unsent_only_corrected(trip: TripSandbox, sandbox_db: str) -> None:
    # given an itinerary sent
    itinerary = trip.registry.get("email.send_itinerary", 1).execute(
        {
            "saga_id": SAGA,
            "to": "ada@example.com",
            "flight_hold": "fh_1",
            "hotel_hold": "hh_1",
            "charge_id": "ch_1",
        },
        "mail-1",
    )
    assert set(itinerary.fields) == {"to", "message_id"}
    # when a correction is sent, twice with its own key
    correction_tool = trip.registry.get("email.send_correction", 1)
    args = {"saga_id": SAGA, "to": "ada@example.com", "message_id": itinerary.resource_id}
    correction = correction_tool.execute(args, "mail-1-correction")
    assert correction_tool.execute(args, "mail-1-correction") == correction
    # then both messages exist: one itinerary, one correction that refers to it
    ledger = ledger_for_saga(sandbox_db, SAGA)
    assert (ledger.itineraries_sent, ledger.corrections_sent) == (1, 1)
    assert correction.fields["corrects"] == itinerary.resource_id
