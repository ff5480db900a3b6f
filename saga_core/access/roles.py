"""Who may do what: the principals of a tenant, their roles, and the allow-only permission rule.

A :class:`Principal` is a person or an agent of one tenant with a set of roles. It is proven
at every entry — a token (CLI, MCP, console), a signed command (Celery) — by the fleet's
principal directory (``application.principals.directory``); this module is only the pure rule every
entry
asks before acting: :func:`check_permitted` allows an :class:`Action` when one of the
principal's roles grants it (:data:`ROLE_ACTIONS`), and refuses everything else. Approving
and denying are decided by the risk gate of the step in question (the role it names, a
person only, four eyes), in :mod:`saga_core.approval.answers`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from saga_core.errors import ErrorKind, SagaError


class PrincipalKind(StrEnum):
    """A person (may approve, when a gate's role allows) or an agent (never approves)."""

    PERSON = "person"
    AGENT = "agent"


class Action(StrEnum):
    """What a principal asks to do; approving is the gate's decision, not a role's."""

    READ = "read"  # status, audit, queue, stats, alerts, list, find, wait
    START = "start"  # start a saga, submit a plan, deposit a secret input
    CANCEL = "cancel"
    RESOLVE = "resolve"  # a typed operator action on a paused saga
    DEAD_LETTERS = "dead_letters"  # see, requeue or discard the tenant's dead letters
    REGISTER = "register"  # register a saga definition for the tenant
    FLEET = "fleet"  # what no tenant owns: unknown-tenant dead letters, workers, /metrics


AGENT_ROLE = "agent"
OPERATOR_ROLE = "operator"
APPROVER_ROLE = "approver"
AUDITOR_ROLE = "auditor"
ADMIN_ROLE = "admin"
FLEET_OPERATOR_ROLE = "fleet_operator"

ROLE_ACTIONS: Mapping[str, frozenset[Action]] = MappingProxyType({
    AGENT_ROLE: frozenset({Action.READ, Action.START, Action.CANCEL}),
    OPERATOR_ROLE: frozenset({Action.READ, Action.CANCEL, Action.RESOLVE, Action.DEAD_LETTERS}),
    APPROVER_ROLE: frozenset({Action.READ}),
    AUDITOR_ROLE: frozenset({Action.READ}),
    ADMIN_ROLE: frozenset({Action.READ, Action.REGISTER}),
    # The platform's person: besides its own tenant's dead letters, it alone sees and
    # resolves those no tenant is proven to own, and the fleet-wide views (the workers
    # page, the metrics endpoints). It never sees another tenant's sagas or letters.
    FLEET_OPERATOR_ROLE: frozenset({Action.READ, Action.DEAD_LETTERS, Action.FLEET}),
})
"""What each built-in role allows (allow-only: an action no role grants is refused). Other
role names are free for gates to name (``payments_approver``); they grant reading."""

ROLE_NAME = re.compile(r"^[a-z][a-z0-9_.\-]{0,63}\Z")  # \Z: $ would let a final newline in
"""A role's name: lower case, as gates and ``sagafleet principals add --role`` spell it."""


class Unauthenticated(SagaError):
    """No valid credential: a token or signing key that is unknown, revoked or malformed."""

    kind = ErrorKind.UNAUTHENTICATED
    hint = "pass a valid token (SAGAFLEET_TOKEN or --token-file); ask an admin for one"


class NotPermitted(SagaError):
    """The principal is proven but none of its roles allows this action here."""

    kind = ErrorKind.FORBIDDEN
    hint = "ask a principal with the named role, or an admin to grant it"


@dataclass(frozen=True)
class Principal:
    """A proven person or agent of one tenant; ``name`` is what events record as the actor.

    ``authenticated`` is False only for the in-process agent a trusted program builds with
    ``Fleet.client(tenant=..., actor=...)``: it holds the database already, so it is trusted
    to act as an agent, never as a person.
    """

    tenant: str
    name: str
    kind: PrincipalKind
    roles: frozenset[str] = field(default_factory=frozenset)
    authenticated: bool = True

    @classmethod
    def in_process_agent(cls, tenant: str, name: str) -> Principal:
        """The agent of a trusted in-process program (not proven by a credential)."""
        return cls(tenant, name, PrincipalKind.AGENT, frozenset({AGENT_ROLE}), False)

    def has_role(self, role: str) -> bool:
        """Whether this principal holds ``role``."""
        return role in self.roles

    def allowed(self) -> frozenset[Action]:
        """Every action one of this principal's roles allows."""
        return frozenset().union(*(ROLE_ACTIONS.get(role, {Action.READ}) for role in self.roles))


def check_permitted(principal: Principal, action: Action, what: str = "") -> None:
    """Allow ``action`` when a role of ``principal`` grants it; else :class:`NotPermitted`
    naming the principal, the action and the roles that would allow it."""
    if action in principal.allowed():
        return
    needed = sorted(role for role, actions in ROLE_ACTIONS.items() if action in actions)
    target = f" on {what}" if what else ""
    raise NotPermitted(
        f"{principal.kind} {principal.name!r} of tenant {principal.tenant!r} may not "
        f"{action}{target}: it needs one of the roles {needed}, and holds {sorted(principal.roles)}"
    )


def answers_to(principal: Principal, owner: str | None) -> bool:
    """Whether a record owned by the tenant ``owner`` may be shown to ``principal``: its own
    tenant's; and a record whose tenant is unknown (``owner`` None: an unsigned or forged
    command, a malformed message) only to a principal holding :attr:`Action.FLEET`."""
    if owner is None:
        return Action.FLEET in principal.allowed()
    return owner == principal.tenant


def role_problems(roles: Iterable[str]) -> list[str]:
    """Why each of ``roles`` is not a valid role name (empty when all are)."""
    return [f"role {role!r} must match {ROLE_NAME.pattern}" for role in roles
            if not isinstance(role, str) or not ROLE_NAME.match(role)]
