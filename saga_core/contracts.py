"""Shared vocabulary of the saga contract: step kinds, semantics, error classes, receipts.

These are the small value types every room speaks: the tool boundary translates provider
errors into :class:`ErrorClass`, workers record :class:`Receipt` objects, and definitions
declare :class:`Semantics`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StepKind(StrEnum):
    """Whether an operation moves the saga forward or undoes/offsets a forward step."""

    FORWARD = "forward"
    COMPENSATION = "compensation"


class Semantics(StrEnum):
    """What a step's effect is and therefore what undoing it means (DESIGN.md table)."""

    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    IDEMPOTENT_BY_KEY = "idempotent_by_key"
    COMPENSABLE = "compensable"
    OFFSETTABLE = "offsettable"
    IRREVERSIBLE = "irreversible"


class ErrorClass(StrEnum):
    """The failure taxonomy every tool error is translated into at the tool boundary."""

    TRANSIENT = "Transient"
    BUSINESS_REJECTION = "BusinessRejection"
    PERMANENT = "Permanent"
    AUTH_EXPIRED = "AuthExpired"
    PRECONDITION_FAILED = "PreconditionFailed"
    AMBIGUOUS = "Ambiguous"


class Receipt(BaseModel):
    """What a provider returned for a committed effect: enough to reconcile and undo it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resource_id: str = Field(min_length=1, max_length=512)
    version: int | None = None
    status: str = Field(default="ok", max_length=128)
    fields: dict[str, Any] = Field(default_factory=dict)

    def get(self, name: str) -> Any:
        """Return a receipt field by name; the top-level attributes are fields too."""
        if name in ("resource_id", "version", "status"):
            return getattr(self, name)
        return self.fields[name]

    def has(self, name: str) -> bool:
        """Whether ``name`` can be read from this receipt."""
        return name in ("resource_id", "version", "status") or name in self.fields


class SagaStatus(StrEnum):
    """Where a saga stands; the last four are the honest terminal states (DESIGN.md rule 8)."""

    RUNNING = "RUNNING"
    COMPENSATING = "COMPENSATING"
    MANUAL_INTERVENTION = "MANUAL_INTERVENTION"
    COMPLETED = "COMPLETED"
    COMPENSATED = "COMPENSATED"
    PARTIALLY_COMPENSATED = "PARTIALLY_COMPENSATED"
    COMMITTED_WITH_REPAIR = "COMMITTED_WITH_REPAIR"

    @property
    def is_terminal(self) -> bool:
        """Whether no further work will ever happen for a saga in this status."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {
        SagaStatus.COMPLETED,
        SagaStatus.COMPENSATED,
        SagaStatus.PARTIALLY_COMPENSATED,
        SagaStatus.COMMITTED_WITH_REPAIR,
    }
)

#: Semantics whose effect is nothing to undo (DESIGN.md: read_only, idempotent).
EFFECT_FREE_SEMANTICS = frozenset({Semantics.READ_ONLY, Semantics.IDEMPOTENT})

#: Semantics that are safe to repeat after the pivot (the provider or the call itself dedupes).
RETRYABLE_SEMANTICS = frozenset(
    {Semantics.READ_ONLY, Semantics.IDEMPOTENT, Semantics.IDEMPOTENT_BY_KEY}
)
