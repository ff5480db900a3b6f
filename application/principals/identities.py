"""External identities: a person signed in by the company's OpenID provider, bound to a principal.

An identity is the provider's ``(issuer, subject)`` (the subject is the provider's stable id
of the person; a name or e-mail may change, the subject does not). :meth:`PostgresIdentities.
sign_in` takes a person the provider vouched for, with the tenant and roles its claims map to
(:mod:`sagafleet.console.sso.person`), and in one transaction:

* **bound already**: finds its principal, whatever the name claim says today; the roles are
  set to the ones the groups grant now (a person moved out of a group loses its role at the
  next sign-in; sessions re-read the principal on every request);
* **first sign-in**: creates a ``person`` principal of that name in that tenant, with no API
  token (it signs in through the provider), or links the unbound ``person`` principal of that
  name an administrator added before;
* and records the sign-in (``fleet.identity_sign_ins``: groups, roles, and whether it created,
  linked, found the principal or changed its roles).

It refuses (:class:`IdentityRefused`, naming why): an agent principal of that name (agents
never come in by single sign-on), a revoked principal, a principal bound to another identity
of the same provider, and a bound identity whose tenant claim now names another tenant.

Tables ``fleet.principal_identities`` and ``fleet.identity_sign_ins`` (workers migration
``0018_principal_identities.sql``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from application.principals.directory import checked_principal
from events import EventStore
from events.eventstore.model import Clock, utc_now
from saga_core.access.roles import Principal, PrincipalKind
from saga_core.errors import ErrorKind, SagaError

__all__ = ["ExternalIdentity", "IdentityRefused", "IdentitySignIn", "PostgresIdentities",
           "SignInOutcome"]


class IdentityRefused(SagaError):
    """The identity cannot sign in as the principal it maps to; the message says why."""

    kind = ErrorKind.FORBIDDEN
    hint = "ask an administrator (sagafleet principals list) to sort out the principal"


class SignInOutcome(StrEnum):
    """What a single sign-on did to the directory (recorded with it)."""

    CREATED = "created"
    LINKED = "linked"
    SIGNED_IN = "signed_in"
    ROLES_CHANGED = "roles_changed"


@dataclass(frozen=True)
class ExternalIdentity:
    """A person the provider vouched for, and the principal its claims map to."""

    issuer: str
    subject: str
    tenant: str
    name: str
    roles: frozenset[str]
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class IdentitySignIn:
    """The principal a sign-in proved, what it did, and the principal's live token's issue
    time (None: it has none), which its console session is bound to."""

    principal: Principal
    outcome: SignInOutcome
    token_issued_at: datetime | None


class PostgresIdentities:
    """External identities bound to the principals of a fleet's database."""

    def __init__(self, store: EventStore, clock: Clock = utc_now) -> None:
        self._store = store
        self._clock = clock

    def sign_in(self, identity: ExternalIdentity) -> IdentitySignIn:
        """Find, link or create the identity's principal, set its roles, record the sign-in."""
        wanted = checked_principal(identity.tenant, identity.name, PrincipalKind.PERSON,
                                   identity.roles)
        now = self._clock()
        with self._store.transaction() as unit:
            conn = unit.connection
            bound = conn.execute(
                "SELECT tenant, name FROM fleet.principal_identities"
                " WHERE issuer = %s AND subject = %s FOR UPDATE",
                (identity.issuer, identity.subject)).fetchone()
            if bound is not None:
                tenant, name = bound
                if tenant != identity.tenant:
                    raise IdentityRefused(
                        f"this identity is {name!r} of tenant {tenant!r}; its tenant claim "
                        f"now names {identity.tenant!r}, and a sign-in never moves a person "
                        "between tenants")
                outcome = self._found(conn, tenant, name, wanted.roles)
                conn.execute("UPDATE fleet.principal_identities SET last_signed_in_at = %s"
                             " WHERE issuer = %s AND subject = %s",
                             (now, identity.issuer, identity.subject))
            else:
                tenant, name = wanted.tenant, wanted.name
                outcome = self._bound_first(conn, identity, wanted, now)
            principal = Principal(tenant, name, PrincipalKind.PERSON, wanted.roles)
            issued = conn.execute(
                "SELECT max(issued_at) FROM fleet.principal_tokens WHERE tenant = %s"
                " AND name = %s AND revoked_at IS NULL", (tenant, name)).fetchone()
            conn.execute(
                "INSERT INTO fleet.identity_sign_ins (issuer, subject, tenant, name, outcome,"
                " groups, roles, signed_in_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (identity.issuer, identity.subject, tenant, name, outcome.value,
                 list(identity.groups), sorted(wanted.roles), now))
        return IdentitySignIn(principal, outcome, issued[0] if issued else None)

    def _found(self, conn: Any, tenant: str, name: str,
               roles: frozenset[str]) -> SignInOutcome:
        """The bound principal, checked and given ``roles``."""
        row = conn.execute(
            "SELECT kind, roles, revoked_at FROM fleet.principals WHERE tenant = %s"
            " AND name = %s FOR UPDATE", (tenant, name)).fetchone()
        kind, held, revoked_at = row
        _check_usable(tenant, name, kind, revoked_at)
        return _set_roles(conn, tenant, name, held, roles, unchanged=SignInOutcome.SIGNED_IN)

    def _bound_first(self, conn: Any, identity: ExternalIdentity, wanted: Principal,
                     now: datetime) -> SignInOutcome:
        """A first sign-in: create the principal, or link the unbound person of that name."""
        tenant, name = wanted.tenant, wanted.name
        created = conn.execute(
            "INSERT INTO fleet.principals (tenant, name, kind, roles, created_at)"
            " VALUES (%s, %s, 'person', %s, %s) ON CONFLICT DO NOTHING RETURNING name",
            (tenant, name, sorted(wanted.roles), now)).fetchone()
        if created is not None:
            outcome = SignInOutcome.CREATED
        else:
            kind, held, revoked_at = conn.execute(
                "SELECT kind, roles, revoked_at FROM fleet.principals WHERE tenant = %s"
                " AND name = %s FOR UPDATE", (tenant, name)).fetchone()
            _check_usable(tenant, name, kind, revoked_at)
            other = conn.execute(
                "SELECT 1 FROM fleet.principal_identities WHERE tenant = %s AND name = %s"
                " AND issuer = %s", (tenant, name, identity.issuer)).fetchone()
            if other is not None:
                raise IdentityRefused(
                    f"principal {name!r} of tenant {tenant!r} is another person of this "
                    "provider (bound to another subject); the name claim does not make you "
                    "them")
            outcome = _set_roles(conn, tenant, name, held, wanted.roles,
                                 unchanged=SignInOutcome.LINKED)
        inserted = conn.execute(
            "INSERT INTO fleet.principal_identities (issuer, subject, tenant, name, bound_at,"
            " last_signed_in_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
            " RETURNING name", (identity.issuer, identity.subject, tenant, name, now, now),
        ).fetchone()
        if inserted is None:  # the same person's second tab raced this one: let it win
            raise IdentityRefused("this identity signed in from another window at the same "
                                  "moment; sign in again")
        return outcome


def _check_usable(tenant: str, name: str, kind: str, revoked_at: datetime | None) -> None:
    if kind != PrincipalKind.PERSON.value:
        raise IdentityRefused(f"principal {name!r} of tenant {tenant!r} is an agent; agents "
                              "never sign in by single sign-on")
    if revoked_at is not None:
        raise IdentityRefused(f"principal {name!r} of tenant {tenant!r} is revoked")


def _set_roles(conn: Any, tenant: str, name: str, held: Iterable[str], roles: frozenset[str], *,
               unchanged: SignInOutcome) -> SignInOutcome:
    """Give the principal ``roles`` (the groups' say, now); ``unchanged`` when it held them."""
    if frozenset(held) == roles:
        return unchanged
    conn.execute("UPDATE fleet.principals SET roles = %s WHERE tenant = %s AND name = %s",
                 (sorted(roles), tenant, name))
    return SignInOutcome.ROLES_CHANGED if unchanged is SignInOutcome.SIGNED_IN else unchanged
