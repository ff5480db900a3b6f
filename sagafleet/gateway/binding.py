"""Who a tool call acts for: every call is bound to one tenant and one actor.

The server is configured with a tenant and actor (``--tenant``/``--actor`` or
``SAGAFLEET_TENANT``). A transport may carry them too, as the HTTP headers
``X-Sagafleet-Tenant`` / ``X-Sagafleet-Actor``, but only a server told to trust them
(behind an authenticating proxy) uses them; an untrusted header that asks for another
tenant is refused rather than silently ignored, so an agent never believes it acts for
a tenant it does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sagafleet.gateway.errors import BindingRefused

TENANT_HEADER = "x-sagafleet-tenant"
ACTOR_HEADER = "x-sagafleet-actor"
_IDENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,127}$")


@dataclass(frozen=True)
class CallerBinding:
    """The tenant and actor one tool call acts as."""

    tenant: str
    actor: str


def checked_identity(value: str, what: str) -> str:
    """``value`` if it is a usable tenant or actor name, else BindingRefused."""
    if not _IDENTITY.match(value):
        raise BindingRefused(
            f"{what} {value!r} is not a valid name (1-128 letters, digits, _ . : @ -)"
        )
    return value


@dataclass(frozen=True)
class BindingPolicy:
    """The server's configured tenant and actor, and whether transport headers may override."""

    tenant: str
    actor: str
    trust_headers: bool = False

    def __post_init__(self) -> None:
        checked_identity(self.tenant, "tenant")
        checked_identity(self.actor, "actor")

    def bind(self, headers: Mapping[str, str] | None = None) -> CallerBinding:
        """The binding of one call, given the transport's headers (None for stdio)."""
        lowered = {k.lower(): v for k, v in (headers or {}).items()}
        tenant = lowered.get(TENANT_HEADER)
        actor = lowered.get(ACTOR_HEADER)
        if not self.trust_headers:
            if tenant is not None and tenant != self.tenant:
                raise BindingRefused(
                    f"this server acts for tenant {self.tenant!r} and does not trust the "
                    f"{TENANT_HEADER} header asking for {tenant!r}"
                )
            return CallerBinding(self.tenant, self.actor)
        return CallerBinding(
            checked_identity(tenant, "tenant") if tenant else self.tenant,
            checked_identity(actor, "actor") if actor else self.actor,
        )
