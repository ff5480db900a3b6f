"""The payout catalogue's four tools over in-memory accounts (``sagafleet/example_sagas/payout*``).

The business rules a payout scenario needs, nothing more:

* ``accounts.debit`` refuses with PreconditionFailed when the precondition it is sent
  (``balance_at_least``) does not hold for the source account's balance;
* ``accounts.credit`` answers ``settled`` at once, except into an account listed in
  ``PayoutBooks.unsettled``: there the transfer stays ``pending`` for good, so the tool's
  postcondition (a lookup that finds it settled) is never observed;
* a refund or reversal is a new record that offsets the debit or credit.

Resource ids are counters (``db_0001``), so two runs of the same scenario match.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from saga_core.contracts import ErrorClass, Receipt
from sagafleet.example_sagas import payout_tool_catalogue
from sagafleet.testing.clock import TestClock
from sagafleet.testing.tools import InMemoryTools
from workers.tools import ToolError

__all__ = ["PayoutBooks", "PayoutTools"]


@dataclass
class PayoutBooks:
    """Account balances, the transfers made and undone, and which accounts never settle."""

    balances: dict[str, int] = field(default_factory=dict)
    unsettled: set[str] = field(default_factory=set)
    debits: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (account, amount)
    credits: dict[str, tuple[str, int]] = field(default_factory=dict)
    refunded: set[str] = field(default_factory=set)
    reversed: set[str] = field(default_factory=set)
    _counter: int = 0

    def _new_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter:04d}"

    def debit(self, args: Mapping[str, Any], key: str) -> Receipt:
        """accounts.debit: take ``amount`` from ``account`` if its balance covers the
        precondition ``balance_at_least``."""
        account, amount = str(args["account"]), int(args["amount"])
        balance = self.balances.get(account, 0)
        wanted = args.get("balance_at_least")
        if wanted is not None and balance < int(wanted):
            raise ToolError(ErrorClass.PRECONDITION_FAILED,
                            f"balance of {account} is {balance}, below {wanted}")
        self.balances[account] = balance - amount
        debit_id = self._new_id("db")
        self.debits[debit_id] = (account, amount)
        return Receipt(resource_id=debit_id, version=1, status="posted",
                       fields={"account": account, "amount": amount,
                               "balance": self.balances[account]})

    def refund(self, args: Mapping[str, Any], key: str) -> Receipt:
        """accounts.refund: give a debit's amount back (once)."""
        debit_id = str(args["debit_id"])
        if debit_id not in self.debits:
            raise ToolError(ErrorClass.PERMANENT, f"no debit {debit_id!r}")
        if debit_id not in self.refunded:
            account, amount = self.debits[debit_id]
            self.balances[account] = self.balances.get(account, 0) + amount
            self.refunded.add(debit_id)
        return Receipt(resource_id=f"refund-{debit_id}", status="refunded")

    def credit(self, args: Mapping[str, Any], key: str) -> Receipt:
        """accounts.credit: add ``amount`` to ``account``; settled unless it never settles."""
        account, amount = str(args["account"]), int(args["amount"])
        credit_id = self._new_id("cr")
        self.credits[credit_id] = (account, amount)
        settled = account not in self.unsettled
        if settled:
            self.balances[account] = self.balances.get(account, 0) + amount
        return Receipt(resource_id=credit_id, version=1,
                       status="settled" if settled else "pending",
                       fields={"account": account, "amount": amount})

    def reverse(self, args: Mapping[str, Any], key: str) -> Receipt:
        """accounts.reverse: undo a credit (once)."""
        credit_id = str(args["credit_id"])
        if credit_id not in self.credits:
            raise ToolError(ErrorClass.PERMANENT, f"no credit {credit_id!r}")
        if credit_id not in self.reversed:
            account, amount = self.credits[credit_id]
            if account not in self.unsettled:
                self.balances[account] = self.balances.get(account, 0) - amount
            self.reversed.add(credit_id)
        return Receipt(resource_id=f"reversal-{credit_id}", status="reversed")

    def money_out(self) -> int:
        """Debited and not refunded, minus credited and not reversed: 0 when the payout
        invariant holds over every saga (money left only where it arrived)."""
        out = sum(a for d, (_, a) in self.debits.items() if d not in self.refunded)
        arrived = sum(a for c, (acc, a) in self.credits.items()
                      if c not in self.reversed and acc not in self.unsettled)
        return out - arrived


class PayoutTools(InMemoryTools):
    """The payout tools over one set of :class:`PayoutBooks`."""

    def __init__(self, clock: TestClock | None = None) -> None:
        super().__init__(payout_tool_catalogue(), clock)
        books = self.books = PayoutBooks()
        self.add("accounts.debit", books.debit)
        self.add("accounts.refund", books.refund)
        self.add("accounts.credit", books.credit)
        self.add("accounts.reverse", books.reverse)
