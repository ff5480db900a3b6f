"""Ledger invariants: one trip and one net charge, or no holds and no net charge."""

from __future__ import annotations

import psycopg

from saga_core.contracts import Receipt
from sagafleet import sandbox
from sagafleet.sandbox import TripSandbox, duplicate_effects, ledger_for_saga, ledger_totals


def book_trip(trip: TripSandbox, saga_id: str) -> dict[str, Receipt]:
    tools = trip.registry
    flight = tools.get("flights.hold", 1).execute(
        {"saga_id": saga_id, "flight_id": "LX38", "customer_email": "t@example.com"},
        f"{saga_id}/flight",
    )
    hotel = tools.get("hotels.hold", 1).execute(
        {"saga_id": saga_id, "hotel_id": "H-SF", "nights": 4}, f"{saga_id}/hotel"
    )
    charge = tools.get("payments.capture", 1).execute(
        {
            "saga_id": saga_id,
            "amount": flight.fields["price"] + hotel.fields["price"],
            "currency": "USD",
            "card_token": "tok_1111",
        },
        f"{saga_id}/charge",
    )
    mail = tools.get("email.send_itinerary", 1).execute(
        {
            "saga_id": saga_id,
            "to": "t@example.com",
            "flight_hold": flight.resource_id,
            "hotel_hold": hotel.resource_id,
            "charge_id": charge.resource_id,
        },
        f"{saga_id}/mail",
    )
    return {"flight": flight, "hotel": hotel, "charge": charge, "mail": mail}


def unwind(trip: TripSandbox, saga_id: str, done: dict[str, Receipt]) -> None:
    tools = trip.registry
    tools.get("payments.refund", 1).execute(
        {
            "saga_id": saga_id,
            "charge_id": done["charge"].resource_id,
            "amount": done["charge"].fields["amount"],
            "expected_version": 1,
        },
        f"{saga_id}/charge/undo",
    )
    for step, tool in (("hotel", "hotels.release"), ("flight", "flights.release")):
        tools.get(tool, 1).execute(
            {"saga_id": saga_id, "hold_id": done[step].resource_id, "expected_version": 1},
            f"{saga_id}/{step}/undo",
        )


def test_a_booked_trip_and_an_unwound_trip_both_hold_the_invariant(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given one completed trip and one fully compensated trip
    book_trip(trip, "ok")
    unwind(trip, "undone", book_trip(trip, "undone"))
    # then each saga holds the invariant in its own way, with no duplicates
    booked, undone = ledger_for_saga(sandbox_db, "ok"), ledger_for_saga(sandbox_db, "undone")
    assert booked.is_complete_trip and booked.holds_trip_invariant
    assert undone.is_unwound and undone.holds_trip_invariant and not undone.is_complete_trip
    totals = ledger_totals(sandbox_db)
    assert totals.sagas == 2
    assert totals.duplicate_effects == () and totals.invariant_violations == ()
    assert totals.net_charge == booked.net_charge > 0
    assert (totals.active_flight_holds, totals.active_hotel_holds) == (1, 1)


def test_a_partial_compensation_breaks_the_invariant(trip: TripSandbox, sandbox_db: str) -> None:
    # given a trip whose holds were released but whose charge was never refunded
    done = book_trip(trip, "partial")
    for step, tool in (("hotel", "hotels.release"), ("flight", "flights.release")):
        trip.registry.get(tool, 1).execute(
            {"saga_id": "partial", "hold_id": done[step].resource_id, "expected_version": 1},
            f"partial/{step}/undo",
        )
    # then the ledger reports it
    ledger = ledger_for_saga(sandbox_db, "partial")
    assert not ledger.holds_trip_invariant
    assert ledger_totals(sandbox_db).invariant_violations == ("partial",)


def test_a_duplicate_effect_from_a_fresh_key_is_detected(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a trip, then the same logical hold and capture repeated under new keys
    # (the classic bug: a fresh UUID per attempt defeats the provider's dedupe)
    book_trip(trip, "dup")
    trip.registry.get("flights.hold", 1).execute(
        {"saga_id": "dup", "flight_id": "LX38", "customer_email": "t@example.com"},
        "dup/flight/attempt-2",
    )
    trip.registry.get("payments.capture", 1).execute(
        {"saga_id": "dup", "amount": 10, "currency": "USD", "card_token": "tok_1111"},
        "dup/charge/attempt-2",
    )
    book_trip(trip, "clean")
    # then exactly those duplicates are reported, for that saga only
    found = {(d.saga_id, d.effect, d.count) for d in duplicate_effects(sandbox_db)}
    assert found == {("dup", "flight_hold", 2), ("dup", "capture", 2)}
    assert duplicate_effects(sandbox_db, "clean") == []
    assert ledger_totals(sandbox_db).invariant_violations == ("dup",)


def test_an_untouched_saga_has_an_empty_ledger(sandbox_db: str) -> None:
    ledger = ledger_for_saga(sandbox_db, "never-ran")
    assert ledger.is_unwound and ledger.holds_trip_invariant and ledger.net_charge == 0


def test_install_is_idempotent_and_keeps_each_provider_in_its_own_schema(
    sandbox_db: str,
) -> None:
    # when the sandbox is installed a second time, nothing is applied again
    assert sandbox.install(sandbox_db) == []
    # then each provider has its own schema with an idempotency_keys table
    with psycopg.connect(sandbox_db) as conn:
        applied = conn.execute(
            "SELECT name FROM public.sagafleet_migrations WHERE namespace = 'sandbox'"
        ).fetchall()
        rows = conn.execute(
            "SELECT table_schema FROM information_schema.tables"
            " WHERE table_name = 'idempotency_keys' ORDER BY table_schema"
        ).fetchall()
    assert applied == [("0001_sandbox",)]
    assert [r[0] for r in rows] == [
        "sandbox_email",
        "sandbox_flights",
        "sandbox_hotels",
        "sandbox_payments",
    ]
