"""The trip saga's invariant, counted from the providers' books: one owner for both the
sandbox (its PostgreSQL ledgers) and the test kit (its in-memory books).

"No duplicate net effect" is proven by counting business effects in the providers' own
books, not tool invocations. The trip invariant is *one trip and one net charge, or no
holds and no net charge*, and never an effect the saga can make once made twice.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DuplicateEffect", "TripLedger"]


@dataclass(frozen=True)
class DuplicateEffect:
    """More effects of one logical operation than the saga can have asked for."""

    saga_id: str
    effect: str  # flight_hold | hotel_hold | capture | itinerary | correction | over_refund
    count: int

    def __str__(self) -> str:
        return f"saga {self.saga_id}: {self.count} × {self.effect}"


@dataclass(frozen=True)
class TripLedger:
    """One saga's footprint in every provider's ledger (amounts in minor units)."""

    saga_id: str
    flight_holds: int
    active_flight_holds: int
    hotel_holds: int
    active_hotel_holds: int
    captures: int
    captured: int
    refunded: int
    itineraries_sent: int
    corrections_sent: int

    @property
    def net_charge(self) -> int:
        """Captured minus refunded."""
        return self.captured - self.refunded

    @property
    def duplicates(self) -> list[DuplicateEffect]:
        """The trip saga makes at most one of each forward effect and one correction each."""
        found = [
            DuplicateEffect(self.saga_id, effect, count)
            for effect, count in (
                ("flight_hold", self.flight_holds),
                ("hotel_hold", self.hotel_holds),
                ("capture", self.captures),
                ("itinerary", self.itineraries_sent),
            )
            if count > 1
        ]
        if self.corrections_sent > max(self.itineraries_sent, 1):
            found.append(DuplicateEffect(self.saga_id, "correction", self.corrections_sent))
        if self.refunded > self.captured:
            found.append(DuplicateEffect(self.saga_id, "over_refund", self.refunded))
        return found

    @property
    def is_complete_trip(self) -> bool:
        """One active flight hold, one active hotel hold, one unrefunded charge."""
        return (
            self.active_flight_holds == 1
            and self.active_hotel_holds == 1
            and self.captures == 1
            and self.refunded == 0
        )

    @property
    def is_unwound(self) -> bool:
        """No active holds and no net charge."""
        return (
            self.active_flight_holds == 0
            and self.active_hotel_holds == 0
            and (self.net_charge == 0)
        )

    @property
    def holds_trip_invariant(self) -> bool:
        """One trip and one net charge, or no holds and no net charge, and no duplicates."""
        return (self.is_complete_trip or self.is_unwound) and not self.duplicates
