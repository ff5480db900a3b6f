"""Inputs and small helpers the test-kit scenarios share."""

from __future__ import annotations

from typing import Any

from saga_core.contracts import StepKind

TRIP_INPUT: dict[str, Any] = {
    "customer_email": "ada@example.com",
    "flight_id": "FL123",
    "hotel_id": "HT456",
    "nights": 2,
    "amount": 42_000,
    "currency": "EUR",
    "card_token": "tok_visa_4242",
}
# The pivot's recipient bounces: the saga unwinds, so every compensation runs.
BOUNCING_INPUT: dict[str, Any] = {**TRIP_INPUT, "customer_email": "ada@bounce.invalid"}
AMOUNT = TRIP_INPUT["amount"]

# The tool each trip step's forward and compensation operation calls.
TRIP_TOOLS: dict[tuple[str, StepKind], str] = {
    ("hold_flight", StepKind.FORWARD): "flights.hold",
    ("hold_flight", StepKind.COMPENSATION): "flights.release",
    ("hold_hotel", StepKind.FORWARD): "hotels.hold",
    ("hold_hotel", StepKind.COMPENSATION): "hotels.release",
    ("capture_payment", StepKind.FORWARD): "payments.capture",
    ("capture_payment", StepKind.COMPENSATION): "payments.refund",
    ("send_itinerary", StepKind.FORWARD): "email.send_itinerary",
    ("send_itinerary", StepKind.COMPENSATION): "email.send_correction",
}
