"""The trip inputs every test world starts sagas with (the real fleet's harness and the
test kit's): one owner, so a scenario means the same trip on real servers and in memory."""

from __future__ import annotations

from typing import Any

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
