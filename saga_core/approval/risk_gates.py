"""Risk gates as catalogue data: when a call of a tool needs a person, and which person.

A :class:`RiskGate` sits on a tool's catalogue entry (``ToolSpec.gate``), so it applies to
every saga that calls the tool — hand-written definitions and agent plans alike. It is data,
never a callable: conditions on the call's resolved arguments (``always``; an amount
argument ``above`` a limit; an ``external_recipient``), cumulative limits on that amount
(``saga_total`` over one saga, ``tenant_window`` over every saga of the tenant in a sliding
period), the role that may approve, whether the approver must be someone other than the
saga's starter (``four_eyes``), the class of risk it guards and how long a request and a
grant stay valid.

Every condition parses what it guards and asks a person on doubt: an amount is judged only
when it is a finite, non-negative JSON number no larger than :data:`MAX_JUDGED_AMOUNT` (not a
string, a bool, NaN, a list); a recipient only when every address the argument names is
read completely and is of an internal domain (:mod:`saga_core.approval.recipients`). Whether a call
needs a person is :meth:`RiskGate.reasons`; how a gate combines with a definition's own
``approval`` is :mod:`saga_core.approval.policy`; the saga's running total is
:mod:`saga_core.approval.totals`; the tenant window is judged when a worker claims the call.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from saga_core.access.roles import APPROVER_ROLE, ROLE_NAME
from saga_core.approval.recipients import ascii_domain, parse_recipients

#: The largest amount a gate judges (beyond it a person looks): far above any real sum in
#: minor units, small enough that totals and evidence stay exact, finite JSON numbers.
MAX_JUDGED_AMOUNT: Final = 10**15
#: The longest tenant window: reservations older than this are of no window's concern.
MAX_WINDOW: Final = timedelta(days=31)
_CURRENCY = re.compile(r"[A-Z]{3}")


class RiskClass(StrEnum):
    """What a gated call can harm: shown to the approver, counted by the audit."""

    MONEY = "money"
    DELETION = "deletion"
    INFRASTRUCTURE = "infrastructure"
    EXTERNAL_COMMUNICATION = "external_communication"
    PERSONAL_DATA = "personal_data"
    ACCESS_CONTROL = "access_control"
    OTHER = "other"


def judged_amount(value: Any) -> Decimal | None:
    """``value`` as an exact amount a gate can compare and sum, or None when it cannot be
    judged (not a JSON number, a bool, NaN or infinite, negative, or above
    :data:`MAX_JUDGED_AMOUNT`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value < 0 or value > MAX_JUDGED_AMOUNT:
        return None
    # str() of a float is its shortest round-trip form: 0.1 stays 0.1, not 0.1000000000000000055.
    return Decimal(value) if isinstance(value, int) else Decimal(str(value))


def _finite_limit(limit: float) -> float:
    if not 0 <= limit <= MAX_JUDGED_AMOUNT:
        raise ValueError(f"a limit must be between 0 and {MAX_JUDGED_AMOUNT}")
    return limit


class AmountLimit(BaseModel):
    """Ask for approval when the resolved argument ``arg`` is above ``limit``, is not an
    amount a gate can judge, or (with ``currency_arg``) is in another currency than
    ``currency``: the limit is a number in that one currency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arg: str
    limit: float = Field(allow_inf_nan=False)
    currency_arg: str | None = None
    currency: str | None = None

    @field_validator("limit")
    @classmethod
    def _limit_in_range(cls, limit: float) -> float:
        return _finite_limit(limit)

    @model_validator(mode="after")
    def _currency_pair(self) -> AmountLimit:
        if (self.currency_arg is None) != (self.currency is None):
            raise ValueError("currency_arg and currency go together: the argument holding "
                             "the call's currency, and the ISO 4217 code the limit is in")
        if self.currency is not None and not _CURRENCY.fullmatch(self.currency):
            raise ValueError(f"currency {self.currency!r} must be an ISO 4217 code (EUR)")
        return self

    @model_serializer(mode="wrap")
    def _omit_no_currency(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Without a currency it dumps as before currencies existed: stored hashes hold.
        data = handler(self)
        if isinstance(data, dict) and self.currency is None:
            data.pop("currency_arg", None)
            data.pop("currency", None)
        return data

    def amount(self, args: dict[str, Any]) -> Decimal | None:
        """The call's amount, when it can be judged against this limit (None: a person)."""
        if self.currency_arg is not None and args.get(self.currency_arg) != self.currency:
            return None
        return judged_amount(args.get(self.arg))

    def doubt(self, args: dict[str, Any]) -> str | None:
        """Why ``args`` need a person under this limit (None: they do not)."""
        amount = self.amount(args)
        if amount is None:
            if self.currency_arg is not None and args.get(self.currency_arg) != self.currency:
                return f"{self.currency_arg} is not {self.currency}, the currency of the limit"
            return (f"{self.arg} is not an amount a gate can judge (a finite number from 0 "
                    f"to {MAX_JUDGED_AMOUNT})")
        if amount > Decimal(str(self.limit)):
            return f"{self.arg} is above {self.limit:g}"
        return None

    def exceeded(self, args: dict[str, Any]) -> bool:
        """Whether ``args`` need a person under this limit."""
        return self.doubt(args) is not None

    def arguments(self) -> list[str]:
        """The argument names this limit reads."""
        return [self.arg] + ([self.currency_arg] if self.currency_arg is not None else [])


class ExternalRecipient(BaseModel):
    """Ask for approval unless every address in argument ``arg`` is of ``internal_domains``.

    ``arg`` holds an address list (``"Ada <ada@corp.example>, bob@corp.example"``) or a list
    of them, parsed as :mod:`saga_core.approval.recipients` says; a domain matches itself and its
    subdomains, compared as lower-case ASCII (IDNA). Anything that cannot be read as
    addresses (not a string, missing, leftover text, a group, a route) is outside.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    arg: str
    internal_domains: list[str] = Field(default_factory=list)

    @field_validator("internal_domains")
    @classmethod
    def _host_names(cls, domains: list[str]) -> list[str]:
        normalised = []
        for domain in domains:
            name = domain.strip().lower().lstrip("@")
            if ascii_domain(name) is None:
                raise ValueError(f"internal domain {domain!r} is not a host name in canonical "
                                 "form (two or more labels, no trailing dot)")
            normalised.append(name)
        return normalised

    def _ascii_domains(self) -> list[str]:
        return [d for d in (ascii_domain(name) for name in self.internal_domains) if d]

    def doubt(self, args: dict[str, Any]) -> str | None:
        """Why ``args`` need a person under this rule (None: every address is internal)."""
        recipients = parse_recipients(args.get(self.arg))
        if recipients is None:
            return f"{self.arg} cannot be read as email addresses"
        internal = self._ascii_domains()
        if not all(any(r.within(d) for d in internal) for r in recipients):
            return f"{self.arg} is outside the internal domains"
        return None

    def exceeded(self, args: dict[str, Any]) -> bool:
        """Whether ``args`` name a recipient not proven internal."""
        return self.doubt(args) is not None


class SagaTotal(BaseModel):
    """Ask for approval when the gated amount summed over every call of the tool in one
    saga (forward and compensation, across plan revisions; see :mod:`saga_core.approval.totals`)
    would pass ``limit`` with this call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: float = Field(allow_inf_nan=False)

    @field_validator("limit")
    @classmethod
    def _limit_in_range(cls, limit: float) -> float:
        return _finite_limit(limit)


class TenantWindow(BaseModel):
    """Ask for approval when the gated amount summed over the tenant's calls of the tool in
    the last ``period`` (ISO 8601, ``PT1H``; a sliding window) would pass ``limit``: judged
    when a worker claims the call, against reservations shared by every saga."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: float = Field(allow_inf_nan=False)
    period: timedelta

    @field_validator("limit")
    @classmethod
    def _limit_in_range(cls, limit: float) -> float:
        return _finite_limit(limit)

    @field_validator("period")
    @classmethod
    def _period_in_range(cls, period: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= period <= MAX_WINDOW:
            raise ValueError(f"a tenant window's period must be from 1 second to "
                             f"{MAX_WINDOW.days} days (ISO 8601, e.g. PT1H)")
        return period


class RiskGate(BaseModel):
    """When a call of this tool needs a person, which role may approve, and for how long."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    risk_class: RiskClass
    always: bool = False
    above: AmountLimit | None = None
    external_recipient: ExternalRecipient | None = None
    # Cumulative limits on the amount ``above`` reads (None: none).
    saga_total: SagaTotal | None = None
    tenant_window: TenantWindow | None = None
    role: str = APPROVER_ROLE
    # The approver may not be the principal that started the saga.
    four_eyes: bool = True
    request_ttl_s: float = Field(default=3600.0, gt=0)
    grant_ttl_s: float = Field(default=900.0, gt=0)
    description: str = ""

    @model_validator(mode="after")
    def _has_condition(self) -> RiskGate:
        if not (self.always or self.above or self.external_recipient):
            raise ValueError("a risk gate needs a condition: always, above or "
                             "external_recipient")
        if (self.saga_total or self.tenant_window) and self.above is None:
            raise ValueError("saga_total and tenant_window sum the amount `above` reads: "
                             "declare above (its limit bounds one call)")
        if not ROLE_NAME.match(self.role):
            raise ValueError(f"a gate role must match {ROLE_NAME.pattern}")
        return self

    @model_serializer(mode="wrap")
    def _omit_no_totals(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A gate without cumulative limits dumps as before they existed: stored hashes hold.
        data = handler(self)
        if isinstance(data, dict):
            for name in ("saga_total", "tenant_window"):
                if data.get(name) is None:
                    data.pop(name, None)
        return data

    def applies(self, args: dict[str, Any]) -> bool:
        """Whether a call with these resolved arguments needs a person (its own arguments
        only; the cumulative limits are :mod:`saga_core.approval.totals` and the claim's)."""
        return bool(self.reasons(args))

    def reasons(self, args: dict[str, Any]) -> list[str]:
        """Why a call with these resolved arguments needs a person (empty: it does not)."""
        found = []
        if self.always:
            found.append("every call needs a person")
        if self.above is not None and (why := self.above.doubt(args)) is not None:
            found.append(why)
        if self.external_recipient is not None and (
                why := self.external_recipient.doubt(args)) is not None:
            found.append(why)
        return found

    def arguments(self) -> list[str]:
        """The argument names this gate's conditions read."""
        names = self.above.arguments() if self.above is not None else []
        if self.external_recipient is not None:
            names.append(self.external_recipient.arg)
        return names
