"""Stripe-like idempotency: a key names one effect; a reused key with another payload fails."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from saga_core.contracts import ErrorClass
from sagafleet.sandbox import TripSandbox, ledger_for_saga
from workers.tools import ToolError

HOLD = {"saga_id": "saga-1", "flight_id": "LH400", "customer_email": "ada@example.com"}
CAPTURE = {"saga_id": "saga-1", "amount": 42_000, "currency": "EUR", "card_token": "tok_visa_4242"}


def count(db: str, table: str, key: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE op_key = %s", (key,)).fetchone()
    assert row is not None
    return int(row[0])


def test_same_key_same_payload_returns_the_stored_receipt_without_a_new_effect(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a flight hold made under key k1
    hold = trip.registry.get("flights.hold", 1)
    first = hold.execute(HOLD, "k1")
    # when the same request is sent again with the same key
    second = hold.execute(dict(HOLD), "k1")
    # then the receipt is the same and the ledger holds one hold
    assert second == first
    assert first.status == "held" and first.version == 1
    assert set(first.fields) == {"flight_id", "seat", "price"}
    assert count(sandbox_db, "sandbox_flights.holds", "k1") == 1
    assert ledger_for_saga(sandbox_db, "saga-1").flight_holds == 1


def test_same_key_other_payload_is_rejected_as_permanent_naming_the_key(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a capture of 420.00 EUR under key pay-1
    capture = trip.registry.get("payments.capture", 1)
    capture.execute(CAPTURE, "pay-1")
    # when the same key is reused for another amount
    with pytest.raises(ToolError) as raised:
        capture.execute({**CAPTURE, "amount": 99_900}, "pay-1")
    # then it is refused loudly, and nothing more was charged
    assert raised.value.error_class is ErrorClass.PERMANENT
    assert "pay-1" in raised.value.message
    assert raised.value.details["code"] == "idempotency_key_reused"
    assert ledger_for_saga(sandbox_db, "saga-1").captured == 42_000


def test_a_key_reused_for_another_operation_of_the_provider_is_rejected(
    trip: TripSandbox,
) -> None:
    # given a capture under key shared-1
    charge = trip.registry.get("payments.capture", 1).execute(CAPTURE, "shared-1")
    # when a refund is sent under the very same key
    refund = trip.registry.get("payments.refund", 1)
    args = {
        "saga_id": "saga-1",
        "charge_id": charge.resource_id,
        "amount": 42_000,
        "expected_version": 1,
    }
    with pytest.raises(ToolError) as raised:
        refund.execute(args, "shared-1")
    # then it is a permanent error and the charge stands
    assert raised.value.error_class is ErrorClass.PERMANENT
    assert "shared-1" in raised.value.message


def test_concurrent_requests_with_one_key_make_one_effect(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given eight workers racing to capture under one key
    capture = trip.registry.get("payments.capture", 1)
    with ThreadPoolExecutor(max_workers=8) as workers:
        receipts = list(workers.map(lambda _: capture.execute(CAPTURE, "race-1"), range(8)))
    # then every worker sees the same charge and the card was charged once
    assert len({r.resource_id for r in receipts}) == 1
    assert count(sandbox_db, "sandbox_payments.charges", "race-1") == 1


def test_the_card_token_is_never_stored_in_clear(trip: TripSandbox, sandbox_db: str) -> None:
    # given a capture with a card token
    token = "tok_secret_card_9876"
    trip.registry.get("payments.capture", 1).execute({**CAPTURE, "card_token": token}, "pay-t")
    # then no column of the payments ledger contains the token
    with psycopg.connect(sandbox_db) as conn:
        dumps = conn.execute(
            "SELECT c::text FROM sandbox_payments.charges c"
            " UNION ALL SELECT k::text FROM sandbox_payments.idempotency_keys k"
        ).fetchall()
        last4 = conn.execute("SELECT card_last4 FROM sandbox_payments.charges").fetchone()
    assert dumps and all(token not in text for (text,) in dumps)
    assert last4 == ("9876",)


def test_invalid_arguments_are_permanent(trip: TripSandbox) -> None:
    # when a capture's amount is a float, not integer minor units
    with pytest.raises(ToolError) as raised:
        trip.registry.get("payments.capture", 1).execute({**CAPTURE, "amount": 4.2}, "bad-1")
    # then the request is permanently invalid and names the field
    assert raised.value.error_class is ErrorClass.PERMANENT
    assert raised.value.details["field"] == "amount"
