"""A tool set whose ordering tool does **not** dedupe by operation key, counting its calls.

``quotes.get`` prices an item (read only). ``orders.place`` writes one row per call into a
PostgreSQL table of the fleet's database, whatever the key: the test reads there how often,
under which key and with which price it was called. Its first call for an item fails as
Transient (a 503 after the row is written, nothing else committed), so the saga retries
it under the same operation key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from saga_core import SagaDefinition, ToolCatalogue
from saga_core.contracts import ErrorClass, Receipt
from workers.tools import Absent, LookupResult, ToolError, ToolRegistry, ToolSet

PRICE = 100

CATALOGUE = ToolCatalogue.model_validate({"tools": [
    {"name": "quotes.get", "version": 1, "semantics": "read_only", "receipt_fields": ["price"],
     "args": {"item": {"type": "string"}}},
    {"name": "orders.place", "version": 1, "semantics": "irreversible", "dedupes_by_key": False,
     "args": {"item": {"type": "string"}, "price": {"type": "integer"}}},
]})

DEFINITION = SagaDefinition.model_validate({
    "name": "order", "version": 1,
    "input": {"item": {"type": "string", "min_length": 1}},
    "steps": [
        {"id": "quote", "tool": "quotes.get", "version": 1, "semantics": "read_only",
         "args": {"item": "${input.item}"},
         "retry": {"max_attempts": 3, "base_delay_s": 0.05, "max_delay_s": 0.1}},
        {"id": "place", "tool": "orders.place", "version": 1, "semantics": "irreversible",
         "depends_on": ["quote"],
         "args": {"item": "${input.item}", "price": "${steps.quote.receipt.price}"},
         "retry": {"max_attempts": 5, "base_delay_s": 0.05, "max_delay_s": 0.1}},
    ],
})

TABLE = ("CREATE TABLE IF NOT EXISTS test_order_calls "
         "(n serial PRIMARY KEY, key text NOT NULL, item text NOT NULL, price integer NOT NULL)")


def calls(database: str) -> list[tuple[str, str, int]]:
    """Every ``orders.place`` call as (key, item, price), oldest first."""
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT key, item, price FROM test_order_calls ORDER BY n").fetchall()
    return [(str(key), str(item), int(price)) for key, item, price in rows]


@dataclass(frozen=True)
class QuoteTool:
    """``quotes.get``: every item costs PRICE."""

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """The quote for the item."""
        return Receipt(resource_id=f"quote-{args['item']}", fields={"price": PRICE})

    def lookup(self, key: str) -> LookupResult:
        """A quote has no effect to find."""
        return Absent("quotes have no effect")


@dataclass(frozen=True)
class OrderTool:
    """``orders.place``: a row per call; the first call for an item answers 503."""

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Record the call; refuse it as Transient if it is the item's first."""
        with psycopg.connect(os.environ["SAGAFLEET_DATABASE_URL"], autocommit=True) as conn:
            (n,) = conn.execute(
                "INSERT INTO test_order_calls (key, item, price) VALUES (%s, %s, %s) "
                "RETURNING n", (key, args["item"], args["price"])).fetchone() or (0,)
            (first,) = conn.execute("SELECT min(n) FROM test_order_calls WHERE item = %s",
                                    (args["item"],)).fetchone() or (n,)
        if n == first:
            raise ToolError(ErrorClass.TRANSIENT, "orders: 503, try again")
        return Receipt(resource_id=f"order-{n}", fields={"price": args["price"]})

    def lookup(self, key: str) -> LookupResult:
        """No lookup by key: this provider does not keep them."""
        return Absent(f"no order is kept under {key!r}")


def tool_set() -> ToolSet:
    """The quote and order tools under their catalogue."""
    return ToolSet(CATALOGUE, ToolRegistry({
        ("quotes.get", 1): QuoteTool(),
        ("orders.place", 1): OrderTool(),
    }))
