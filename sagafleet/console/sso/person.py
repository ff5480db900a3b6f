"""From a verified ID token to the person the console signs in: :func:`person_of`.

Pure: the settings and the token's claims in, an :class:`SsoPerson` out, or
:class:`~sagafleet.console.sso.refusal.SsoRefused` saying what the claims lack:

* **roles**: the union of the roles :data:`OidcSettings.role_map
  <sagafleet.sso_settings.OidcSettings.role_map>` grants the groups listed in the groups
  claim; none (no group is mapped) refuses the person (403): a person the company did not put
  in a console group has no business in the console;
* **tenant**: the configured one, or the value of the tenant claim;
* **name**: the name claim's value (a principal name; a new principal is named so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from application.principals.directory import name_problems
from sagafleet.console.sso.id_token import VerifiedIdToken
from sagafleet.console.sso.refusal import SsoRefused
from sagafleet.sso_settings import OidcSettings

__all__ = ["SsoPerson", "groups_of", "person_of", "roles_for"]


@dataclass(frozen=True)
class SsoPerson:
    """Who signs in: the provider's identity (issuer, subject) and the console principal it
    stands for (tenant, name, roles)."""

    issuer: str
    subject: str
    tenant: str
    name: str
    roles: frozenset[str]
    groups: tuple[str, ...] = ()


def groups_of(claims: Mapping[str, Any], claim: str) -> tuple[str, ...]:
    """The groups the claim lists (a single text counts as one group; absent: none)."""
    value = claims.get(claim)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise SsoRefused("malformed_groups", f"the ID token's {claim!r} claim is not a list of "
                     "group names")


def roles_for(groups: tuple[str, ...], role_map: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Every role the mapped groups among ``groups`` grant (empty: no group is mapped)."""
    return frozenset().union(*(role_map.get(group, frozenset()) for group in groups))


def _text_claim(claims: Mapping[str, Any], claim: str, what: str, code: str) -> str:
    value = claims.get(claim)
    if not isinstance(value, str) or not value:
        raise SsoRefused(code, f"the ID token has no {claim!r} claim to take the {what} from")
    problems = name_problems(what, value)
    if problems:
        raise SsoRefused(code, f"the ID token's {claim!r} claim cannot be a {what}: "
                         f"{problems[0]}")
    return value


def person_of(token: VerifiedIdToken, settings: OidcSettings) -> SsoPerson:
    """The person a verified token signs in, or ``SsoRefused`` (403 for no mapped group)."""
    claims = token.claims
    name = _text_claim(claims, settings.name_claim, "name", "no_name")
    if settings.tenant is not None:
        tenant = settings.tenant
    else:
        tenant = _text_claim(claims, settings.tenant_claim or "", "tenant", "no_tenant")
    groups = groups_of(claims, settings.groups_claim)
    roles = roles_for(groups, settings.role_map)
    if not roles:
        listed = ", ".join(groups[:10]) if groups else "none"
        raise SsoRefused(
            "no_mapped_group",
            f"{name} is in no group that grants a console role (your groups: {listed}); ask "
            "an administrator to add you to one",
            status=403)
    return SsoPerson(token.issuer, token.subject, tenant, name, roles, groups)
