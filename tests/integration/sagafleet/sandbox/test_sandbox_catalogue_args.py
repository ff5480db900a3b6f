"""The providers accept the argument names of the trip catalogue (sagafleet/example_sagas)."""

from __future__ import annotations

import pytest

from saga_core.contracts import ErrorClass
from sagafleet.sandbox import (
    SandboxCatalogueError,
    TripSandbox,
    build_trip_sandbox,
    ledger_for_saga,
)
from workers.tools import ToolError

SAGA = "saga-cat"


def test_catalogue_shaped_forward_and_compensation_args_work(
    trip: TripSandbox, sandbox_db: str
) -> None:
    tools = trip.registry
    # given a trip booked with the catalogue's argument names
    flight = tools.get("flights.hold", 1).execute(
        {"saga_id": SAGA, "flight_id": "OS88", "passenger_email": "p@example.com"}, "c/flight"
    )
    hotel = tools.get("hotels.hold", 1).execute(
        {"saga_id": SAGA, "hotel_id": "H-WIEN", "nights": 2, "guest_email": "p@example.com"},
        "c/hotel",
    )
    charge = tools.get("payments.capture", 1).execute(
        {
            "saga_id": SAGA,
            "amount": 12_345.0,
            "currency": "EUR",
            "card_token": "tok_5555",
            "reference": f"trip {SAGA}",
        },
        "c/charge",
    )
    mail = tools.get("email.send_itinerary", 1).execute(
        {
            "saga_id": SAGA,
            "to": "p@example.com",
            "flight_hold": flight.resource_id,
            "seat": flight.fields["seat"],
            "hotel_hold": hotel.resource_id,
            "nights": 2,
            "payment": charge.resource_id,
        },
        "c/mail",
    )
    assert charge.fields == {"amount": 12_345, "currency": "EUR"}
    # when it is compensated with the catalogue's compensation arguments
    tools.get("flights.release", 1).execute(
        {"saga_id": SAGA, "hold_id": flight.resource_id, "expect_version": flight.version},
        "c/flight/undo",
    )
    tools.get("hotels.release", 1).execute(
        {"saga_id": SAGA, "hold_id": hotel.resource_id}, "c/hotel/undo"
    )
    refund = tools.get("payments.refund", 1).execute(
        {
            "saga_id": SAGA,
            "capture_id": charge.resource_id,
            "amount": charge.fields["amount"],
            "currency": charge.fields["currency"],
        },
        "c/charge/undo",
    )
    tools.get("email.send_correction", 1).execute(
        {"saga_id": SAGA, "to": mail.fields["to"], "original_message": mail.resource_id},
        "c/mail/undo",
    )
    # then the saga is unwound with a correction on record
    ledger = ledger_for_saga(sandbox_db, SAGA)
    assert ledger.is_unwound and ledger.holds_trip_invariant
    assert (ledger.itineraries_sent, ledger.corrections_sent) == (1, 1)
    assert set(refund.fields) >= {"amount", "currency"}


def test_an_unconditional_release_of_a_released_hold_is_a_failed_precondition(
    trip: TripSandbox,
) -> None:
    hold = trip.registry.get("hotels.hold", 1).execute(
        {"saga_id": SAGA, "hotel_id": "H-1", "nights": 1}, "u/hotel"
    )
    release = trip.registry.get("hotels.release", 1)
    release.execute({"saga_id": SAGA, "hold_id": hold.resource_id}, "u/undo-1")
    with pytest.raises(ToolError) as raised:
        release.execute({"saga_id": SAGA, "hold_id": hold.resource_id}, "u/undo-2")
    assert raised.value.error_class is ErrorClass.PRECONDITION_FAILED


def test_a_tool_built_as_non_deduping_really_duplicates_on_a_repeated_key(
    sandbox_db: str,
) -> None:
    # given the itinerary tool built as unable to dedupe (as its catalogue entry allows)
    trip = build_trip_sandbox(sandbox_db, non_deduping={"email.send_itinerary"})
    assert trip.tools.catalogue.require("email.send_itinerary", 1).dedupes_by_key is False
    send = trip.registry.get("email.send_itinerary", 1)
    args = {"saga_id": SAGA, "to": "p@example.com", "flight_hold": "fh", "hotel_hold": "hh"}
    # when the same key is sent twice (a blind retry)
    first = send.execute(args, "nd/mail")
    second = send.execute(args, "nd/mail")
    # then two emails went out, the invariants see the duplicate, and lookup finds the first
    assert first.resource_id != second.resource_id
    assert [d.effect for d in ledger_for_saga(sandbox_db, SAGA).duplicates] == ["itinerary"]
    assert send.lookup("nd/mail") == first


def test_a_tool_the_catalogue_says_dedupes_cannot_be_built_non_deduping(sandbox_db: str) -> None:
    # given the sandbox catalogue's promise that flights.hold dedupes by key
    # when a test asks for a flights provider that ignores repeated keys
    # then the sandbox refuses: the catalogue would lie to the orchestrator
    with pytest.raises(SandboxCatalogueError, match=r"flights\.hold"):
        build_trip_sandbox(sandbox_db, non_deduping={"flights.hold"})
    with pytest.raises(SandboxCatalogueError, match=r"trains\.book"):
        build_trip_sandbox(sandbox_db, non_deduping={"trains.book"})
