"""The four sandbox providers of the trip saga: flights, hotels, payments and email.

Each keeps its ledger in its own schema. Forward effects create versioned resources;
compensations name the resource and the version the forward step saw, and fail with 412
when it changed since. Money is in integer minor units (cents). Business rules that a
caller can trigger on purpose:

* a ``flight_id`` containing ``SOLDOUT`` → 409 ``sold_out``;
* a ``hotel_id`` containing ``FULL`` → 409 ``no_availability``;
* a ``card_token`` containing ``declined`` → 402 ``card_declined``;
* a recipient ending in ``@bounce.invalid`` → 409 ``recipient_rejected``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from sagafleet.sandbox._db import ConnectionSource
from sagafleet.sandbox.errors import (
    ProviderError,
    invalid_request,
    not_found,
    precondition_failed,
)
from sagafleet.sandbox.faults import FaultInjector
from sagafleet.sandbox.provider import (
    ProviderResponse,
    SandboxProvider,
    first_of,
    optional_version,
    require_int,
    require_str,
    stable_number,
)

__all__ = ["EmailProvider", "FlightsProvider", "HotelsProvider", "PaymentsProvider"]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def _check_owner(kind: str, ident: str, owner: str, saga_id: str) -> None:
    if owner != saga_id:
        raise ProviderError(
            403, "forbidden", f"{kind} {ident!r} belongs to another saga", {kind: ident}
        )


def _check_version(kind: str, ident: str, expected: int | None, actual: int) -> None:
    # Without an expected version the caller asked for an unconditional compensation.
    if expected is not None and expected != actual:
        raise precondition_failed(kind, ident, expected, actual)


class _HoldProvider(SandboxProvider):
    """Holds with versions: ``hold`` creates one, ``release`` undoes it under a precondition."""

    def __init__(
        self, db: ConnectionSource, *, faults: FaultInjector | None = None, latency_s: float = 0.0
    ) -> None:
        super().__init__(db, faults=faults, latency_s=latency_s)
        self._forward("hold", self._hold)
        self._compensation("release", self._release, self._change_hold)

    def _hold(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        raise NotImplementedError

    def _release(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        saga_id = require_str(args, "saga_id")
        hold_id = require_str(args, "hold_id")
        expected = optional_version(args)
        holds = self._table("holds")
        row = conn.execute(
            sql.SQL("SELECT saga_id, version, status FROM {} WHERE hold_id = %s FOR UPDATE").format(
                holds
            ),
            (hold_id,),
        ).fetchone()
        if row is None:
            raise not_found("hold_id", hold_id)
        owner, version, status = row
        _check_owner("hold_id", hold_id, owner, saga_id)
        _check_version("hold_id", hold_id, expected, version)
        if status != "held":  # only reachable for an unconditional release
            raise ProviderError(
                412,
                "precondition_failed",
                f"hold_id {hold_id!r} is already {status}",
                {"hold_id": hold_id, "status": status, "actual_version": version},
            )
        updated = conn.execute(
            sql.SQL(
                "UPDATE {} SET status = 'released', version = version + 1, updated_at = now()"
                " WHERE hold_id = %s RETURNING version"
            ).format(holds),
            (hold_id,),
        ).fetchone()
        assert updated is not None
        return ProviderResponse(hold_id, int(updated[0]), "released", {"hold_id": hold_id})

    def _change_hold(self, conn: psycopg.Connection[Any], args: Mapping[str, Any]) -> None:
        conn.execute(
            sql.SQL(
                "UPDATE {} SET version = version + 1, updated_at = now() WHERE hold_id = %s"
            ).format(self._table("holds")),
            (str(args.get("hold_id", "")),),
        )


class FlightsProvider(_HoldProvider):
    """Seat holds on flights (``hold``/``release``)."""

    name = "flights"
    schema = "sandbox_flights"
    business_rejection = (409, "sold_out")

    def _hold(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        saga_id = require_str(args, "saga_id")
        flight_id = require_str(args, "flight_id")
        customer_email = require_str(args, first_of(args, "customer_email", "passenger_email"))
        if "SOLDOUT" in flight_id.upper():
            raise ProviderError(409, "sold_out", f"flight {flight_id!r} is sold out")
        seat = f"{1 + stable_number(key, 40)}{'ABCDEF'[stable_number(key + 'seat', 6)]}"
        price = 9_900 + 100 * stable_number(flight_id, 500)
        hold_id = _new_id("fh")
        conn.execute(
            "INSERT INTO sandbox_flights.holds (hold_id, saga_id, op_key, flight_id,"
            " customer_email, seat, price, status) VALUES (%s, %s, %s, %s, %s, %s, %s, 'held')",
            (hold_id, saga_id, key, flight_id, customer_email, seat, price),
        )
        return ProviderResponse(
            hold_id, 1, "held", {"flight_id": flight_id, "seat": seat, "price": price}
        )


class HotelsProvider(_HoldProvider):
    """Room holds for a number of nights (``hold``/``release``)."""

    name = "hotels"
    schema = "sandbox_hotels"
    business_rejection = (409, "no_availability")

    def _hold(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        saga_id = require_str(args, "saga_id")
        hotel_id = require_str(args, "hotel_id")
        nights = require_int(args, "nights", minimum=1)
        if "FULL" in hotel_id.upper():
            raise ProviderError(409, "no_availability", f"hotel {hotel_id!r} has no rooms")
        price = nights * (7_500 + 100 * stable_number(hotel_id, 300))
        hold_id = _new_id("hh")
        conn.execute(
            "INSERT INTO sandbox_hotels.holds (hold_id, saga_id, op_key, hotel_id, nights,"
            " price, status) VALUES (%s, %s, %s, %s, %s, %s, 'held')",
            (hold_id, saga_id, key, hotel_id, nights, price),
        )
        return ProviderResponse(
            hold_id, 1, "held", {"hotel_id": hotel_id, "nights": nights, "price": price}
        )


class PaymentsProvider(SandboxProvider):
    """Card captures and refunds; a refund is a new row that offsets, history remains."""

    name = "payments"
    schema = "sandbox_payments"
    business_rejection = (402, "card_declined")

    def __init__(
        self, db: ConnectionSource, *, faults: FaultInjector | None = None, latency_s: float = 0.0
    ) -> None:
        super().__init__(db, faults=faults, latency_s=latency_s)
        self._forward("capture", self._capture)
        self._compensation("refund", self._refund, self._change_charge)

    def _capture(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        saga_id = require_str(args, "saga_id")
        amount = require_int(args, "amount", minimum=1)
        currency = require_str(args, "currency").upper()
        if len(currency) != 3 or not currency.isalpha():
            raise invalid_request("currency must be a 3-letter ISO code", field="currency")
        card_token = require_str(args, "card_token")
        if "declined" in card_token.lower():
            raise ProviderError(402, "card_declined", "the card was declined")
        # The token itself is never stored: a fingerprint finds repeats, last4 helps humans.
        fingerprint = hashlib.sha256(card_token.encode()).hexdigest()[:16]
        charge_id = _new_id("ch")
        conn.execute(
            "INSERT INTO sandbox_payments.charges (charge_id, saga_id, op_key, amount, currency,"
            " card_fingerprint, card_last4, status)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, 'captured')",
            (charge_id, saga_id, key, amount, currency, fingerprint, card_token[-4:]),
        )
        return ProviderResponse(charge_id, 1, "captured", {"amount": amount, "currency": currency})

    def _refund(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        saga_id = require_str(args, "saga_id")
        charge_id = require_str(args, first_of(args, "charge_id", "capture_id"))
        amount = require_int(args, "amount", minimum=1)
        expected = optional_version(args)
        row = conn.execute(
            "SELECT saga_id, version, amount, currency,"
            " amount - (SELECT coalesce(sum(r.amount), 0) FROM sandbox_payments.refunds r"
            "           WHERE r.charge_id = c.charge_id)"
            " FROM sandbox_payments.charges c WHERE charge_id = %s FOR UPDATE",
            (charge_id,),
        ).fetchone()
        if row is None:
            raise not_found("charge_id", charge_id)
        owner, version, _captured, currency, refundable = row
        _check_owner("charge_id", charge_id, owner, saga_id)
        _check_version("charge_id", charge_id, expected, version)
        asked_currency = args.get("currency")
        if asked_currency is not None and str(asked_currency).upper() != currency:
            raise invalid_request(
                f"refund currency {asked_currency!r} differs from the charge's {currency!r}",
                field="currency",
            )
        if amount > refundable:
            raise invalid_request(
                f"refund of {amount} exceeds the refundable {refundable} on {charge_id!r}",
                charge_id=charge_id,
                refundable=int(refundable),
            )
        refund_id = _new_id("re")
        conn.execute(
            "INSERT INTO sandbox_payments.refunds (refund_id, charge_id, saga_id, op_key,"
            " amount, currency) VALUES (%s, %s, %s, %s, %s, %s)",
            (refund_id, charge_id, saga_id, key, amount, currency),
        )
        updated = conn.execute(
            "UPDATE sandbox_payments.charges"
            "   SET version = version + 1, updated_at = now(),"
            "       status = CASE WHEN %s THEN 'refunded' ELSE status END"
            " WHERE charge_id = %s RETURNING version",
            (amount == refundable, charge_id),
        ).fetchone()
        assert updated is not None
        return ProviderResponse(
            refund_id,
            int(updated[0]),
            "refunded",
            {"charge_id": charge_id, "amount": amount, "currency": currency},
        )

    def _change_charge(self, conn: psycopg.Connection[Any], args: Mapping[str, Any]) -> None:
        conn.execute(
            "UPDATE sandbox_payments.charges SET version = version + 1, updated_at = now()"
            " WHERE charge_id = %s",
            (str(args.get("charge_id", "")),),
        )


class EmailProvider(SandboxProvider):
    """Outgoing mail: irreversible; a correction is a new message replying to the first."""

    name = "email"
    schema = "sandbox_email"
    business_rejection = (409, "recipient_rejected")

    def __init__(
        self, db: ConnectionSource, *, faults: FaultInjector | None = None, latency_s: float = 0.0
    ) -> None:
        super().__init__(db, faults=faults, latency_s=latency_s)
        self._forward("send_itinerary", self._send_itinerary)
        # A sent message has no version to change; a correction only needs it to exist.
        self._compensation("send_correction", self._send_correction, None)

    def _recipient(self, args: Mapping[str, Any]) -> str:
        to = require_str(args, "to")
        if "@" not in to:
            raise invalid_request(f"{to!r} is not an email address", field="to")
        if to.endswith("@bounce.invalid"):
            raise ProviderError(409, "recipient_rejected", f"{to!r} rejects mail")
        return to

    def _send(
        self,
        conn: psycopg.Connection[Any],
        *,
        kind: str,
        saga_id: str,
        key: str,
        to: str,
        body: Mapping[str, Any],
        in_reply_to: str | None = None,
    ) -> ProviderResponse:
        message_id = _new_id("msg")
        conn.execute(
            "INSERT INTO sandbox_email.messages (message_id, saga_id, op_key, kind, to_address,"
            " in_reply_to, body) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (message_id, saga_id, key, kind, to, in_reply_to, Jsonb(dict(body))),
        )
        fields: dict[str, Any] = {"to": to, "message_id": message_id}
        if in_reply_to is not None:
            fields["corrects"] = in_reply_to
        return ProviderResponse(message_id, 1, "sent", fields)

    def _send_itinerary(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        saga_id = require_str(args, "saga_id")
        to = self._recipient(args)
        body = {name: value for name, value in args.items() if name not in ("saga_id", "to")}
        return self._send(conn, kind="itinerary", saga_id=saga_id, key=key, to=to, body=body)

    def _send_correction(
        self, conn: psycopg.Connection[Any], args: Mapping[str, Any], key: str
    ) -> ProviderResponse:
        saga_id = require_str(args, "saga_id")
        to = self._recipient(args)
        original = require_str(args, first_of(args, "message_id", "original_message"))
        row = conn.execute(
            "SELECT saga_id FROM sandbox_email.messages WHERE message_id = %s", (original,)
        ).fetchone()
        if row is None:
            raise not_found("message_id", original)
        _check_owner("message_id", original, row[0], saga_id)
        body = {"corrects": original, "reason": args.get("reason", "the itinerary was withdrawn")}
        return self._send(
            conn,
            kind="correction",
            saga_id=saga_id,
            key=key,
            to=to,
            body=body,
            in_reply_to=original,
        )
