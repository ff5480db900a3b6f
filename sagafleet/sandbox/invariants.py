"""Ledger invariants: what the providers' own books say happened, per saga and in total.

This is how the demo and the tests prove "no duplicate net effect": count business
effects in the external ledgers, not tool invocations. The trip invariant is *one trip
and one net charge, or no holds and no net charge*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from sagafleet.example_sagas.ledger import DuplicateEffect, TripLedger
from sagafleet.sandbox._db import ConnectionSource, connect

__all__ = [
    "DuplicateEffect",
    "LedgerTotals",
    "TripLedger",
    "duplicate_effects",
    "ledger_for_saga",
    "ledger_totals",
    "saga_ledgers",
]


@dataclass(frozen=True)
class LedgerTotals:
    """The whole sandbox at once: totals, duplicate effects, sagas breaking the invariant."""

    sagas: int
    active_flight_holds: int
    active_hotel_holds: int
    captured: int
    refunded: int
    itineraries_sent: int
    corrections_sent: int
    duplicate_effects: tuple[DuplicateEffect, ...]
    invariant_violations: tuple[str, ...]  # saga ids neither a complete trip nor unwound

    @property
    def net_charge(self) -> int:
        """Captured minus refunded, across every saga."""
        return self.captured - self.refunded


_LEDGERS = """
WITH sagas AS (
    SELECT saga_id FROM sandbox_flights.holds
    UNION SELECT saga_id FROM sandbox_hotels.holds
    UNION SELECT saga_id FROM sandbox_payments.charges
    UNION SELECT saga_id FROM sandbox_payments.refunds
    UNION SELECT saga_id FROM sandbox_email.messages
)
SELECT s.saga_id,
       (SELECT count(*) FROM sandbox_flights.holds h WHERE h.saga_id = s.saga_id)
           AS flight_holds,
       (SELECT count(*) FROM sandbox_flights.holds h
         WHERE h.saga_id = s.saga_id AND h.status = 'held') AS active_flight_holds,
       (SELECT count(*) FROM sandbox_hotels.holds h WHERE h.saga_id = s.saga_id)
           AS hotel_holds,
       (SELECT count(*) FROM sandbox_hotels.holds h
         WHERE h.saga_id = s.saga_id AND h.status = 'held') AS active_hotel_holds,
       (SELECT count(*) FROM sandbox_payments.charges c WHERE c.saga_id = s.saga_id)
           AS captures,
       (SELECT coalesce(sum(c.amount), 0) FROM sandbox_payments.charges c
         WHERE c.saga_id = s.saga_id)::bigint AS captured,
       (SELECT coalesce(sum(r.amount), 0) FROM sandbox_payments.refunds r
         WHERE r.saga_id = s.saga_id)::bigint AS refunded,
       (SELECT count(*) FROM sandbox_email.messages m
         WHERE m.saga_id = s.saga_id AND m.kind = 'itinerary') AS itineraries_sent,
       (SELECT count(*) FROM sandbox_email.messages m
         WHERE m.saga_id = s.saga_id AND m.kind = 'correction') AS corrections_sent
  FROM sagas s
 WHERE %(saga_id)s::text IS NULL OR s.saga_id = %(saga_id)s::text
 ORDER BY s.saga_id
"""


def _ledgers(conn: psycopg.Connection[Any], saga_id: str | None) -> list[TripLedger]:
    with conn.transaction():
        cur = conn.cursor(row_factory=class_row(TripLedger))
        return cur.execute(_LEDGERS, {"saga_id": saga_id}).fetchall()


def saga_ledgers(db: ConnectionSource) -> list[TripLedger]:
    """Every saga that left a trace in any ledger."""
    with connect(db) as conn:
        return _ledgers(conn, None)


def ledger_for_saga(db: ConnectionSource, saga_id: str) -> TripLedger:
    """One saga's footprint; all zeros when it touched no provider."""
    with connect(db) as conn:
        found = _ledgers(conn, saga_id)
    if found:
        return found[0]
    return TripLedger(saga_id, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def duplicate_effects(db: ConnectionSource, saga_id: str | None = None) -> list[DuplicateEffect]:
    """Duplicate effects for one saga, or for all when ``saga_id`` is None."""
    if saga_id is not None:
        return ledger_for_saga(db, saga_id).duplicates
    return [dup for ledger in saga_ledgers(db) for dup in ledger.duplicates]


def ledger_totals(db: ConnectionSource) -> LedgerTotals:
    """Totals over every saga, with the duplicates and the sagas violating the invariant."""
    ledgers = saga_ledgers(db)
    return LedgerTotals(
        sagas=len(ledgers),
        active_flight_holds=sum(x.active_flight_holds for x in ledgers),
        active_hotel_holds=sum(x.active_hotel_holds for x in ledgers),
        captured=sum(x.captured for x in ledgers),
        refunded=sum(x.refunded for x in ledgers),
        itineraries_sent=sum(x.itineraries_sent for x in ledgers),
        corrections_sent=sum(x.corrections_sent for x in ledgers),
        duplicate_effects=tuple(d for x in ledgers for d in x.duplicates),
        invariant_violations=tuple(x.saga_id for x in ledgers if not x.holds_trip_invariant),
    )
