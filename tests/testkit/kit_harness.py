"""Inputs and small helpers the test-kit scenarios share."""

from __future__ import annotations

from trip_inputs import TRIP_INPUT

from saga_core.contracts import StepKind

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
