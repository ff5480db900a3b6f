"""Amounts as a person reads them: a number in minor units and its ISO 4217 currency made
``$2,500.00`` or ``€420.00``.

sagafleet's definitions carry money as an integer count of the currency's minor unit (the
trip's ``amount`` is "in cents"), which is what a gate judges and what a tool is called with.
The console shows it divided by the currency's minor-unit exponent, with the currency's sign
when it has a well-known one and its code otherwise. Without a currency nothing is known
about the unit, so the number is shown as it is (grouped), never guessed into money.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

__all__ = ["Money", "format_amount", "money_of"]

SIGNS: Final = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹", "KRW": "₩",
                "CHF": "CHF ", "CAD": "CA$", "AUD": "A$"}
"""Currencies shown with a sign; any other shows its code ("SEK 1,200.00")."""

EXPONENTS: Final = {"JPY": 0, "KRW": 0, "ISK": 0, "CLP": 0, "VND": 0, "XAF": 0, "XOF": 0,
                    "BHD": 3, "KWD": 3, "OMR": 3, "JOD": 3, "TND": 3, "IQD": 3, "LYD": 3}
"""ISO 4217 minor-unit exponents that are not 2."""

_CODE: Final = re.compile(r"[A-Z]{3}")


@dataclass(frozen=True)
class Money:
    """An amount in minor units of one currency."""

    minor: Decimal
    currency: str

    def __str__(self) -> str:
        return format_amount(self.minor, self.currency)


def format_amount(minor: Decimal | int | float, currency: str | None) -> str:
    """``minor`` (minor units of ``currency``) as a person reads it: ``$2,500.00``; without
    a valid ISO 4217 code, the number as it is, grouped (``250,000``)."""
    value = Decimal(str(minor)) if isinstance(minor, float) else Decimal(minor)
    code = currency.upper() if isinstance(currency, str) else ""
    if not _CODE.fullmatch(code):
        return f"{value:,}" if value == value.to_integral_value() else f"{value:,f}"
    exponent = EXPONENTS.get(code, 2)
    major = value.scaleb(-exponent)
    text = f"{major:,.{exponent}f}"
    sign = SIGNS.get(code)
    return f"{sign}{text}" if sign else f"{code} {text}"


def money_of(arguments: dict[str, Any], amount_arg: str | None,
             gate_currency: str | None = None) -> Money | None:
    """The request's amount as money: the ``amount_arg`` argument in the currency the gate
    names, else the one the arguments carry beside it (``currency``, or ``<arg>_currency``);
    None when there is no numeric amount or no currency to read it in."""
    if amount_arg is None:
        return None
    raw = arguments.get(amount_arg)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    currency = gate_currency or next(
        (arguments[name] for name in (f"{amount_arg}_currency", "currency")
         if isinstance(arguments.get(name), str)), None)
    if not isinstance(currency, str) or not _CODE.fullmatch(currency.upper()):
        return None
    try:
        minor = Decimal(str(raw)) if isinstance(raw, float) else Decimal(raw)
    except InvalidOperation:
        return None
    if not minor.is_finite():
        return None
    return Money(minor, currency.upper())
