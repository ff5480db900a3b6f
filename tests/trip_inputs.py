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


def by_secret_ref(client: Any, data: dict[str, Any] = TRIP_INPUT) -> dict[str, Any]:
    """``data`` as an agent sends it over the broker: its secret card token deposited
    through ``client`` (a ``SagaClient`` of the saga's tenant) and carried as a ref, since
    a raw secret in a Celery command is refused. A ref is spent by one start: call this once
    per start."""
    return {**data, "card_token": client.put_secret(data["card_token"]).as_input()}
