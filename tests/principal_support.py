"""Authenticated principals for tests: added to a fleet's directory (PostgreSQL for a real
fleet, memory for a TestFleet) and proven by their token, as every entry proves them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from application.principals.directory import PrincipalConflict
from saga_core.access.roles import Principal, PrincipalKind


def token_for(fleet: Any, name: str, roles: Iterable[str] = ("approver",), *,
              tenant: str = "default", kind: PrincipalKind = PrincipalKind.PERSON) -> str:
    """A live token of ``name`` in ``fleet.principals``: added with ``roles``, or (when the
    name is there already) rotated, so a test may ask for the same principal again."""
    try:
        return str(fleet.principals.add(tenant, name, kind, roles).token)
    except PrincipalConflict:
        return str(fleet.principals.rotate(tenant, name).token)


def authenticated(fleet: Any, name: str, roles: Iterable[str] = ("approver",), *,
                  tenant: str = "default",
                  kind: PrincipalKind = PrincipalKind.PERSON) -> Principal:
    """The principal ``fleet.authenticate`` proves from a fresh token of ``name``."""
    principal: Principal = fleet.authenticate(
        token_for(fleet, name, roles, tenant=tenant, kind=kind))
    return principal


def person(fleet: Any, name: str, roles: Iterable[str] = ("approver",), *,
           tenant: str = "default") -> Any:
    """A SagaClient of ``fleet`` acting as the authenticated person ``name``."""
    return fleet.client_for(authenticated(fleet, name, roles, tenant=tenant))


def issue_token(database_url: str, name: str, roles: Iterable[str] = ("approver",), *,
                tenant: str = "default", kind: PrincipalKind = PrincipalKind.PERSON) -> str:
    """A live token of ``name`` in the (migrated) database at ``database_url``, for a
    command-line test to pass as SAGAFLEET_TOKEN."""
    from application.principals.postgres import PostgresPrincipals
    from events import EventStore

    with EventStore.connect(database_url, pool_size=1) as store:
        return token_for(_Directory(PostgresPrincipals(store)), name, roles, tenant=tenant,
                         kind=kind)


class _Directory:
    """A directory seen as a fleet (what :func:`token_for` asks for)."""

    def __init__(self, principals: Any) -> None:
        self.principals = principals
