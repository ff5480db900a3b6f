"""Shared data and helpers of the fleet tests (imported by file name: tests are not a package)."""

from __future__ import annotations

import redis

TRIP_INPUT = {
    "customer_email": "ada@example.com",
    "flight_id": "FL123",
    "hotel_id": "HT456",
    "nights": 2,
    "amount": 42_000,
    "currency": "EUR",
    "card_token": "tok_visa_4242",
}


def redis_client(broker_url: str) -> redis.Redis:
    """A plain client on the broker (TCP or unix socket)."""
    if broker_url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=broker_url.removeprefix("redis+socket://"))
    return redis.Redis.from_url(broker_url)
