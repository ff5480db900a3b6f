"""Declared conditions of a tool contract and a definition: postconditions and deadline policies.

A postcondition is what must be *observed* before a receipt may advance a saga (the seed:
"only a verified tool receipt and observed postcondition should advance the saga"). It is
data in the tool's :class:`~saga_core.definitions.catalogue.ToolSpec`, never code:

* ``observe: lookup`` — the effect must be found again through the tool's ``lookup(key)``
  (the reconciliation path) after the receipt arrived, and the found receipt must meet the
  ``receipt`` conditions, if any;
* ``observe: receipt`` — the receipt itself (or, once looked up, the latest found receipt)
  must meet the ``receipt`` conditions.

A :class:`ReceiptCondition` compares one receipt field with a constant (``eq``, ``ne``,
``in``, ``not_in``, ``gt``, ``ge``, ``lt``, ``le``) or tests its presence: no expression
language, nothing evaluated. ``horizon_s`` bounds how long the orchestrator keeps looking
before the step is escalated as in doubt (:mod:`saga_core.engine.condition_rules` holds that rule).

:data:`DeadlinePolicy` is what a definition says happens when a step's timeout passes or
its forward precondition fails: ``retry`` (the same key, bounded), ``compensate`` (before
the pivot) or ``escalate`` (a person decides).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from saga_core.contracts import Receipt
from saga_core.limits import CONDITION_VALUES, RECEIPT_CONDITIONS

DeadlinePolicy = Literal["retry", "compensate", "escalate"]
"""What follows a missed step timeout or a failed forward precondition."""

CompensationDeadlinePolicy = Literal["retry", "escalate"]
"""What follows a missed compensation deadline: go on trying, or ask a person."""

ConditionOp = Literal["eq", "ne", "in", "not_in", "gt", "ge", "lt", "le", "present", "absent"]

_ORDERED = frozenset({"gt", "ge", "lt", "le"})
_SCALAR = (str, int, float, bool, type(None))


class ReceiptCondition(BaseModel):
    """One declared comparison of a receipt field with a constant (no expressions)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str = Field(min_length=1, max_length=128)
    op: ConditionOp = "eq"
    value: Any = None

    @model_validator(mode="after")
    def _value_fits_op(self) -> ReceiptCondition:
        value = self.value
        if self.op in ("present", "absent"):
            if value is not None:
                raise ValueError(f"{self.op} takes no value")
        elif self.op in ("in", "not_in"):
            if not isinstance(value, list) or not value:
                raise ValueError(f"{self.op} needs a non-empty list of values")
            CONDITION_VALUES.check(f"condition on {self.field!r} values", len(value))
            if not all(isinstance(v, _SCALAR) for v in value):
                raise ValueError(f"{self.op} compares with scalars only")
        elif self.op in _ORDERED:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{self.op} compares with a number")
            if not math.isfinite(value):
                raise ValueError(f"{self.op} compares with a finite number")
        elif not isinstance(value, _SCALAR):
            raise ValueError(f"{self.op} compares with a scalar")
        return self

    def holds(self, receipt: Receipt) -> bool:
        """Whether ``receipt`` meets this condition (a missing field meets only ``absent``,
        and a non-scalar one only ``present``: neither equals, differs from, nor orders
        against anything)."""
        present = receipt.has(self.field)
        if self.op == "present":
            return present
        if self.op == "absent":
            return not present
        if not present:
            return False
        seen = receipt.get(self.field)
        if not isinstance(seen, _SCALAR):
            return False  # a list or an object is not the scalar compared: nothing holds
        match self.op:
            case "eq":
                return _same(seen, self.value)
            case "ne":
                return not _same(seen, self.value)
            case "in":
                return any(_same(seen, v) for v in self.value)
            case "not_in":
                return not any(_same(seen, v) for v in self.value)
        if isinstance(seen, bool) or not isinstance(seen, int | float):
            return False  # only numbers are ordered
        match self.op:
            case "gt":
                return bool(seen > self.value)
            case "ge":
                return bool(seen >= self.value)
            case "lt":
                return bool(seen < self.value)
        return bool(seen <= self.value)

    def describe(self) -> str:
        """The condition as a person reads it, e.g. ``status in ['confirmed']``."""
        if self.op in ("present", "absent"):
            return f"{self.field} {self.op}"
        return f"{self.field} {self.op} {self.value!r}"


def _same(seen: Any, expected: Any) -> bool:
    """Equality that never confuses ``True`` with ``1`` (JSON keeps them apart, so do we)."""
    if isinstance(seen, bool) or isinstance(expected, bool):
        return isinstance(seen, bool) and isinstance(expected, bool) and seen == expected
    return bool(seen == expected)


class Postcondition(BaseModel):
    """What must be observed before a receipt of this tool advances a saga."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    observe: Literal["lookup", "receipt"]
    receipt: list[ReceiptCondition] = Field(default_factory=list)
    # How long after the receipt the orchestrator keeps looking before it escalates.
    horizon_s: float = Field(gt=0, allow_inf_nan=False)
    description: str = Field(default="", max_length=2_000)

    @field_validator("receipt")
    @classmethod
    def _bounded(cls, conditions: list[ReceiptCondition]) -> list[ReceiptCondition]:
        RECEIPT_CONDITIONS.check("postcondition receipt conditions", len(conditions))
        return conditions

    @model_validator(mode="after")
    def _something_to_observe(self) -> Postcondition:
        if self.observe == "receipt" and not self.receipt:
            raise ValueError("observe: receipt needs at least one receipt condition")
        return self

    def unmet(self, receipt: Receipt) -> list[ReceiptCondition]:
        """The receipt conditions ``receipt`` does not meet (empty: all met)."""
        return [c for c in self.receipt if not c.holds(receipt)]

    def describe(self) -> str:
        """The postcondition as a person reads it."""
        how = ("found again by lookup(key)" if self.observe == "lookup"
               else "the receipt shows it")
        conditions = " and ".join(c.describe() for c in self.receipt)
        text = f"{how}{' with ' + conditions if conditions else ''}, within {self.horizon_s:g} s"
        return f"{self.description} ({text})" if self.description else text
