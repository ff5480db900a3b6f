"""Budgets as data: a saga's time limit and cost budget, tool costs, and the fold's ledger.

A definition may declare a :class:`SagaBudget` (the catalogue declares one for agent plans,
which never choose their own): a time limit counted from ``SagaStarted`` and a cost budget
over the tools' declared ``ToolSpec.cost`` per call, and what happens when either is
exceeded (``on_exceeded``). The fold keeps a :class:`BudgetLedger` per saga; the rules that
read it (when a limit is exceeded, what a claim may spend) are in :mod:`saga_core.engine.stops`.

What costs: every call a worker starts (each ``StepStarted``: first attempts, retries,
re-claims after an expired lease), forward or compensation, at its tool's declared cost.
Lookups by key cost nothing. Compensations are charged (the total stays honest) but never
refused: undoing is never stopped by a budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from saga_core.engine.events import BudgetExceeded, LimitName


class OnExceeded(StrEnum):
    """What a saga does when a limit is exceeded before its pivot (after it: escalate)."""

    COMPENSATE = "compensate"
    ESCALATE = "escalate"


class SagaBudget(BaseModel):
    """A whole saga's stop conditions: seconds from its start, total declared cost of its
    calls, and what happens when either is exceeded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    time_limit_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    on_exceeded: OnExceeded = OnExceeded.COMPENSATE


def money(value: float) -> Decimal:
    """A declared cost as an exact decimal (0.1 + 0.2 must equal 0.3 in a budget)."""
    return Decimal(str(value))


@dataclass(frozen=True)
class LimitBreach:
    """The recorded breach of a saga's limit (from its BudgetExceeded event)."""

    limit: LimitName
    reason: str
    at: datetime


@dataclass(frozen=True)
class BudgetLedger:
    """What the fold keeps for the limits: when the saga started, what its calls cost so
    far, the breach if one was recorded, and whether a person lifted the limits."""

    started_at: datetime | None = None
    spent: Decimal = Decimal(0)
    breach: LimitBreach | None = None
    lifted: bool = False


NO_LEDGER = BudgetLedger()
"""The ledger of a saga before its start (shared: ledgers are immutable)."""


# -- the fold's part -------------------------------------------------------------------------


def charged(ledger: BudgetLedger, cost: Decimal) -> BudgetLedger:
    """The ledger after a call that costs ``cost`` was started."""
    return BudgetLedger(ledger.started_at, ledger.spent + cost, ledger.breach, ledger.lifted)


def with_breach(ledger: BudgetLedger, event: BudgetExceeded) -> BudgetLedger:
    """The ledger with ``event``'s breach recorded."""
    breach = LimitBreach(event.limit, event.reason, event.at)
    return BudgetLedger(ledger.started_at, ledger.spent, breach, ledger.lifted)


def lifted(ledger: BudgetLedger) -> BudgetLedger:
    """The ledger after a person resumed a saga stopped at a limit: no limit applies any more."""
    return BudgetLedger(ledger.started_at, ledger.spent, ledger.breach, True)
