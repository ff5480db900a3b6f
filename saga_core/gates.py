"""Risk gates as catalogue data: when a call of a tool needs a person, and which person.

A :class:`RiskGate` sits on a tool's catalogue entry (``ToolSpec.gate``), so it applies to
every saga that calls the tool — hand-written definitions and agent plans alike. It is data,
never a callable: a condition on the call's resolved arguments (``always``; an amount
argument ``above`` a limit; an ``external_recipient``), the role that may approve, whether
the approver must be someone other than the saga's starter (``four_eyes``), the class of
risk it guards and how long a request and a grant stay valid. Whether a call needs a person
is decided by :meth:`RiskGate.applies`; how a gate combines with a definition's own
``approval`` is :mod:`saga_core.gate_policy`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from saga_core.authority import APPROVER_ROLE, ROLE_NAME


class RiskClass(StrEnum):
    """What a gated call can harm: shown to the approver, counted by the audit."""

    MONEY = "money"
    DELETION = "deletion"
    INFRASTRUCTURE = "infrastructure"
    EXTERNAL_COMMUNICATION = "external_communication"
    PERSONAL_DATA = "personal_data"
    ACCESS_CONTROL = "access_control"
    OTHER = "other"


class AmountLimit(BaseModel):
    """Ask for approval when the resolved argument ``arg`` is numerically above ``limit``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    arg: str
    limit: float

    def exceeded(self, args: dict[str, Any]) -> bool:
        """Whether ``args`` need a person under this limit."""
        value = args.get(self.arg)
        # A non-numeric value cannot be proven under the limit, so it needs a human.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value > self.limit
        return True


class ExternalRecipient(BaseModel):
    """Ask for approval when an address in argument ``arg`` is outside ``internal_domains``.

    ``arg`` holds one address or a list of them; a domain matches itself and its
    subdomains. Anything that is not an address of an internal domain (no ``@``, not a
    string, missing) cannot be proven internal, so it needs a person.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    arg: str
    internal_domains: list[str] = Field(default_factory=list)

    @field_validator("internal_domains")
    @classmethod
    def _lower(cls, domains: list[str]) -> list[str]:
        return [domain.strip().lower().lstrip("@") for domain in domains]

    def internal(self, address: Any) -> bool:
        """Whether ``address`` is an email address of one of the internal domains."""
        if not isinstance(address, str) or "@" not in address:
            return False
        domain = address.rsplit("@", 1)[1].strip().rstrip(">").lower()
        return any(domain == d or domain.endswith("." + d) for d in self.internal_domains if d)

    def exceeded(self, args: dict[str, Any]) -> bool:
        """Whether ``args`` name a recipient outside the internal domains."""
        value = args.get(self.arg)
        addresses = value if isinstance(value, list) else [value]
        return not addresses or not all(self.internal(a) for a in addresses)


class RiskGate(BaseModel):
    """When a call of this tool needs a person, which role may approve, and for how long."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    risk_class: RiskClass
    always: bool = False
    above: AmountLimit | None = None
    external_recipient: ExternalRecipient | None = None
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
        if not ROLE_NAME.match(self.role):
            raise ValueError(f"a gate role must match {ROLE_NAME.pattern}")
        return self

    def applies(self, args: dict[str, Any]) -> bool:
        """Whether a call with these resolved arguments needs a person."""
        return bool(self.reasons(args))

    def reasons(self, args: dict[str, Any]) -> list[str]:
        """Why a call with these resolved arguments needs a person (empty: it does not)."""
        found = []
        if self.always:
            found.append("every call needs a person")
        if self.above is not None and self.above.exceeded(args):
            found.append(f"{self.above.arg} is above {self.above.limit:g}")
        if self.external_recipient is not None and self.external_recipient.exceeded(args):
            found.append(f"{self.external_recipient.arg} is outside the internal domains")
        return found

    def arguments(self) -> list[str]:
        """The argument names this gate's conditions read."""
        names = [self.above.arg] if self.above is not None else []
        if self.external_recipient is not None:
            names.append(self.external_recipient.arg)
        return names
