"""The trip catalogue's eight tools over in-memory books, and the ledger that checks them.

The same business rules as the sandbox providers (``sagafleet/sandbox/providers.py``), so a
scenario can be written once for both:

* a ``flight_id`` containing ``SOLDOUT`` → sold out; a ``hotel_id`` containing ``FULL`` → no
  rooms; a ``card_token`` containing ``declined`` → declined; a recipient ending in
  ``@bounce.invalid`` → rejected (each a BusinessRejection);
* holds and charges are versioned; a release or refund that names a version the target has
  moved past fails with PreconditionFailed (``target_changed`` moves it on purpose);
* a refund is a new record that offsets the charge; a correction is a new message.

Resource ids are counters (``fh_0001``), so two runs of the same scenario match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from saga_core.contracts import ErrorClass, Receipt
from saga_core.definitions.catalogue import ToolCatalogue
from sagafleet.example_sagas import trip_tool_catalogue
from sagafleet.example_sagas.ledger import TripLedger
from sagafleet.testing.clock import TestClock
from sagafleet.testing.tools import InMemoryTools
from workers.tools import ToolError

__all__ = ["TripBooks", "TripLedger", "TripTools"]


@dataclass
class Hold:
    """A flight seat or a hotel room held for a saga."""

    hold_id: str
    saga_id: str
    key: str
    price: int
    status: str = "held"  # held | released
    version: int = 1


@dataclass
class Charge:
    """A captured card payment; refunds are separate records that offset it."""

    charge_id: str
    saga_id: str
    key: str
    amount: int
    currency: str
    version: int = 1
    refunded: int = 0


@dataclass(frozen=True)
class Message:
    """A sent email: an itinerary, or a correction replying to one."""

    message_id: str
    saga_id: str
    key: str
    kind: str  # itinerary | correction
    to: str
    corrects: str | None = None


@dataclass
class TripBooks:
    """What the four trip providers hold, in memory."""

    flight_holds: dict[str, Hold] = field(default_factory=dict)
    hotel_holds: dict[str, Hold] = field(default_factory=dict)
    charges: dict[str, Charge] = field(default_factory=dict)
    refunds: list[tuple[str, str, int]] = field(default_factory=list)  # (refund, charge, amount)
    messages: dict[str, Message] = field(default_factory=dict)
    _counter: int = 0

    def new_id(self, prefix: str) -> str:
        """A fresh, reproducible resource id."""
        self._counter += 1
        return f"{prefix}_{self._counter:04d}"

    # -- flights and hotels

    def hold_flight(self, args: Mapping[str, Any], key: str) -> Receipt:
        """flights.hold: a seat on ``flight_id``."""
        flight_id = _text(args, "flight_id")
        if "SOLDOUT" in flight_id.upper():
            raise ToolError(ErrorClass.BUSINESS_REJECTION, f"flight {flight_id!r} is sold out")
        hold = Hold(self.new_id("fh"), _text(args, "saga_id"), key, 9_900)
        self.flight_holds[hold.hold_id] = hold
        seat = f"{1 + len(self.flight_holds) % 40}A"
        return Receipt(resource_id=hold.hold_id, version=1, status="held",
                       fields={"flight_id": flight_id, "seat": seat, "price": hold.price})

    def hold_hotel(self, args: Mapping[str, Any], key: str) -> Receipt:
        """hotels.hold: a room at ``hotel_id`` for ``nights``."""
        hotel_id = _text(args, "hotel_id")
        nights = int(args["nights"])
        if "FULL" in hotel_id.upper():
            raise ToolError(ErrorClass.BUSINESS_REJECTION, f"hotel {hotel_id!r} has no rooms")
        hold = Hold(self.new_id("hh"), _text(args, "saga_id"), key, 7_500 * nights)
        self.hotel_holds[hold.hold_id] = hold
        return Receipt(resource_id=hold.hold_id, version=1, status="held",
                       fields={"hotel_id": hotel_id, "nights": nights, "price": hold.price})

    def releaser(self, holds: dict[str, Hold]) -> Callable[[Mapping[str, Any], str], Receipt]:
        """flights.release / hotels.release over ``holds``: only the version the step saw."""

        def release(args: Mapping[str, Any], key: str) -> Receipt:
            hold = _owned(holds, _text(args, "hold_id"), _text(args, "saga_id"))
            _check_version(hold.hold_id, _expected(args), hold.version)
            if hold.status != "held":
                raise ToolError(ErrorClass.PRECONDITION_FAILED,
                                f"hold {hold.hold_id!r} is already {hold.status}")
            hold.status, hold.version = "released", hold.version + 1
            return Receipt(resource_id=hold.hold_id, version=hold.version, status="released",
                           fields={"hold_id": hold.hold_id})

        return release

    @staticmethod
    def bumper(holds: dict[str, Hold]) -> Callable[[Mapping[str, Any]], None]:
        """Someone else edits a hold (``target_changed``): its version moves on."""

        def bump(args: Mapping[str, Any]) -> None:
            hold = holds.get(str(args.get("hold_id", "")))
            if hold is not None:
                hold.version += 1

        return bump

    # -- payments

    def capture(self, args: Mapping[str, Any], key: str) -> Receipt:
        """payments.capture: charge ``amount`` (minor units) to the card."""
        amount, currency = int(args["amount"]), _text(args, "currency").upper()
        if "declined" in _text(args, "card_token").lower():
            raise ToolError(ErrorClass.BUSINESS_REJECTION, "the card was declined")
        charge = Charge(self.new_id("ch"), _text(args, "saga_id"), key, amount, currency)
        self.charges[charge.charge_id] = charge
        return Receipt(resource_id=charge.charge_id, version=1, status="captured",
                       fields={"amount": amount, "currency": currency})

    def refund(self, args: Mapping[str, Any], key: str) -> Receipt:
        """payments.refund: offset (part of) a charge; never more than is left."""
        charge_id = _text(args, "capture_id" if "capture_id" in args else "charge_id")
        charge = _owned(self.charges, charge_id, _text(args, "saga_id"))
        _check_version(charge_id, _expected(args), charge.version)
        amount = int(args["amount"])
        if amount > charge.amount - charge.refunded:
            raise ToolError(ErrorClass.PERMANENT,
                            f"refund of {amount} exceeds what is left of {charge_id!r}")
        refund_id = self.new_id("re")
        self.refunds.append((refund_id, charge_id, amount))
        charge.refunded += amount
        charge.version += 1
        return Receipt(resource_id=refund_id, version=charge.version, status="refunded",
                       fields={"charge_id": charge_id, "amount": amount,
                               "currency": charge.currency})

    def change_charge(self, args: Mapping[str, Any]) -> None:
        """Someone else edits a charge (``target_changed``)."""
        charge = self.charges.get(str(args.get("capture_id", "")))
        if charge is not None:
            charge.version += 1

    # -- email

    def send_itinerary(self, args: Mapping[str, Any], key: str) -> Receipt:
        """email.send_itinerary: irreversible once sent."""
        return self._send(args, key, "itinerary", None)

    def send_correction(self, args: Mapping[str, Any], key: str) -> Receipt:
        """email.send_correction: a new message replying to the original."""
        original = _owned(self.messages, _text(args, "original_message"), _text(args, "saga_id"))
        return self._send(args, key, "correction", original.message_id)

    def _send(self, args: Mapping[str, Any], key: str, kind: str, corrects: str | None
              ) -> Receipt:
        to = _text(args, "to")
        if to.endswith("@bounce.invalid"):
            raise ToolError(ErrorClass.BUSINESS_REJECTION, f"{to!r} rejects mail")
        message = Message(self.new_id("msg"), _text(args, "saga_id"), key, kind, to, corrects)
        self.messages[message.message_id] = message
        fields: dict[str, Any] = {"to": to, "message_id": message.message_id}
        if corrects is not None:
            fields["corrects"] = corrects
        return Receipt(resource_id=message.message_id, version=1, status="sent", fields=fields)

    # -- the ledger

    def ledger(self, saga_id: str) -> TripLedger:
        """One saga's footprint in every book."""
        flights = [h for h in self.flight_holds.values() if h.saga_id == saga_id]
        hotels = [h for h in self.hotel_holds.values() if h.saga_id == saga_id]
        charges = [c for c in self.charges.values() if c.saga_id == saga_id]
        messages = [m for m in self.messages.values() if m.saga_id == saga_id]
        return TripLedger(
            saga_id=saga_id,
            flight_holds=len(flights),
            active_flight_holds=sum(h.status == "held" for h in flights),
            hotel_holds=len(hotels),
            active_hotel_holds=sum(h.status == "held" for h in hotels),
            captures=len(charges),
            captured=sum(c.amount for c in charges),
            refunded=sum(c.refunded for c in charges),
            itineraries_sent=sum(m.kind == "itinerary" for m in messages),
            corrections_sent=sum(m.kind == "correction" for m in messages),
        )


class TripTools(InMemoryTools):
    """The trip tools over one set of :class:`TripBooks`; ``ledger(saga_id)`` checks them."""

    def __init__(self, clock: TestClock | None = None,
                 catalogue: ToolCatalogue | None = None) -> None:
        super().__init__(catalogue or trip_tool_catalogue(), clock)
        books = self.books = TripBooks()
        self.add("flights.hold", books.hold_flight)
        self.add("flights.release", books.releaser(books.flight_holds),
                 change_target=books.bumper(books.flight_holds))
        self.add("hotels.hold", books.hold_hotel)
        self.add("hotels.release", books.releaser(books.hotel_holds),
                 change_target=books.bumper(books.hotel_holds))
        self.add("payments.capture", books.capture)
        self.add("payments.refund", books.refund, change_target=books.change_charge)
        self.add("email.send_itinerary", books.send_itinerary)
        self.add("email.send_correction", books.send_correction)

    def ledger(self, saga_id: str) -> TripLedger:
        """One saga's footprint in the trip books."""
        return self.books.ledger(saga_id)


def _text(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise ToolError(ErrorClass.PERMANENT, f"{name} must be a non-empty string")
    return value


def _owned(records: Mapping[str, Any], ident: str, saga_id: str) -> Any:
    """The record ``ident`` of this saga; a missing or foreign one is a permanent failure."""
    record = records.get(ident)
    if record is None:
        raise ToolError(ErrorClass.PERMANENT, f"{ident!r} does not exist")
    if record.saga_id != saga_id:
        raise ToolError(ErrorClass.PERMANENT, f"{ident!r} belongs to another saga")
    return record


def _expected(args: Mapping[str, Any]) -> Any:
    """The version a compensation expects, under either spelling the sandbox accepts."""
    return args.get("expect_version", args.get("expected_version"))


def _check_version(ident: str, expected: Any, actual: int) -> None:
    # Without an expected version the compensation is unconditional (the trip's refund).
    if expected is not None and int(expected) != actual:
        raise ToolError(ErrorClass.PRECONDITION_FAILED,
                        f"{ident!r} is at version {actual}, expected {expected}")
