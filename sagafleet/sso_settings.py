"""The console's single sign-on settings, checked together: :func:`oidc_settings`.

The ``SAGAFLEET_OIDC_*`` variables are fields of the one settings model
(:class:`sagafleet.settings.Settings`, so ``--help`` and the README list them); this module
turns them into one :class:`OidcSettings` when the console starts, or ``None`` when single
sign-on is off (no issuer), and refuses a half or malformed configuration with a
:class:`~sagafleet.settings.ConfigurationError` that names each variable at fault. Values are
never repeated in a message but for the ones that are not secret (URLs, claim names).

The role map (``SAGAFLEET_OIDC_ROLE_MAP``) is ``group=role`` pairs separated by commas; a
group may be named twice to grant two roles. The ``agent`` role is refused there: an agent
signs in with its token, never as a person through the company's identity provider.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from application.principals.directory import name_problems
from saga_core.access.roles import AGENT_ROLE, role_problems
from sagafleet.settings import ConfigurationError, Settings, env_name, reveal

__all__ = ["CALLBACK_PATH", "OidcSettings", "oidc_settings", "parse_role_map"]

CALLBACK_PATH: Final = "/sign-in/oidc/callback"
"""Where the provider sends the browser back (the redirect URL's path must end so)."""
_LOOPBACK_NAMES: Final = frozenset({"localhost"})
_CLAIM_CHARS: Final = 128


@dataclass(frozen=True)
class OidcSettings:
    """A checked single sign-on configuration (one provider, one console client)."""

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    redirect_url: str
    role_map: Mapping[str, frozenset[str]]
    """Each group to the roles it grants."""
    tenant: str | None
    """Every person's tenant, or None when :attr:`tenant_claim` names it per person."""
    tenant_claim: str | None
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    groups_claim: str = "groups"
    name_claim: str = "preferred_username"
    provider_name: str = "single sign-on"
    clock_skew_s: float = 60.0


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_problem(value: str) -> str | None:
    """Why ``value`` cannot be an issuer or redirect URL (None when it can)."""
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
    except ValueError:
        return "is not a URL"
    if parts.scheme not in ("https", "http") or not host:
        return "must be an https:// URL"
    if parts.scheme == "http" and not _loopback(host):
        return "must be https:// (plain http only on loopback, for tests)"
    if parts.query or parts.fragment:
        return "must have no query or fragment"
    if parts.username or parts.password:
        return "must carry no user name or password"
    return None


def parse_role_map(text: str) -> dict[str, frozenset[str]]:
    """``group=role,group=role`` to each group's roles (``ConfigurationError`` naming the
    variable and the first bad pair)."""
    variable = env_name("oidc_role_map")
    granted: dict[str, set[str]] = {}
    for raw in text.split(","):
        pair = raw.strip()
        if not pair:
            continue
        group, sep, role = (part.strip() for part in pair.partition("="))
        if not sep or not group or not role:
            raise ConfigurationError(
                f"{variable} is invalid: {pair!r} is not group=role (pairs separated by "
                "commas, e.g. ops-approvers=operator,auditors=auditor)")
        problems = role_problems([role])
        if problems:
            raise ConfigurationError(f"{variable} is invalid: {problems[0]}")
        if role == AGENT_ROLE:
            raise ConfigurationError(
                f"{variable} is invalid: group {group!r} maps to the agent role; agents sign "
                "in with their token, never by single sign-on")
        granted.setdefault(group, set()).add(role)
    if not granted:
        raise ConfigurationError(
            f"{variable} is invalid: it maps no group to a role (a person in no mapped group "
            "is refused, so nobody could sign in)")
    return {group: frozenset(roles) for group, roles in granted.items()}


def _claim(settings: Settings, name: str) -> str:
    value = getattr(settings, name)
    if not isinstance(value, str) or not value.strip() or len(value) > _CLAIM_CHARS:
        raise ConfigurationError(f"{env_name(name)} is invalid: give a claim name of 1 to "
                                 f"{_CLAIM_CHARS} characters")
    return value.strip()


_REQUIRED: Final = ("oidc_client_id", "oidc_client_secret", "oidc_redirect_url",
                    "oidc_role_map")
_DEPENDENT: Final = (*_REQUIRED, "oidc_tenant", "oidc_tenant_claim")


def oidc_settings(settings: Settings) -> OidcSettings | None:
    """The checked single sign-on settings, or None when ``SAGAFLEET_OIDC_ISSUER`` is unset
    (then no other ``SAGAFLEET_OIDC_*`` setting may be given: a half configuration is an
    error, never silently off)."""
    if settings.oidc_issuer is None:
        given = [env_name(name) for name in _DEPENDENT if getattr(settings, name) is not None]
        if given:
            raise ConfigurationError(
                f"{', '.join(given)} set but {env_name('oidc_issuer')} is unset; set the "
                "issuer to turn single sign-on on, or unset these")
        return None
    problems = []
    missing = [env_name(name) for name in _REQUIRED if getattr(settings, name) is None]
    if missing:
        problems.append(f"{', '.join(missing)} must be set with {env_name('oidc_issuer')}")
    issuer = settings.oidc_issuer
    issue = _url_problem(issuer)
    if issue:
        problems.append(f"{env_name('oidc_issuer')} {issue}")
    redirect = settings.oidc_redirect_url or ""
    if redirect:
        issue = _url_problem(redirect)
        if issue is None and not urlsplit(redirect).path.endswith(CALLBACK_PATH):
            issue = f"must end in {CALLBACK_PATH} (the console's callback)"
        if issue:
            problems.append(f"{env_name('oidc_redirect_url')} {issue}")
    if (settings.oidc_tenant is None) == (settings.oidc_tenant_claim is None):
        problems.append(f"set one of {env_name('oidc_tenant')} (one tenant for everyone) "
                        f"and {env_name('oidc_tenant_claim')} (a claim naming it)")
    elif settings.oidc_tenant is not None:
        problems += [f"{env_name('oidc_tenant')} is invalid: {p}"
                     for p in name_problems("tenant", settings.oidc_tenant)]
    scopes = tuple(settings.oidc_scopes.split())
    if "openid" not in scopes:
        problems.append(f"{env_name('oidc_scopes')} must include openid")
    if not settings.oidc_provider_name.strip() or len(settings.oidc_provider_name) > 64:
        problems.append(f"{env_name('oidc_provider_name')} must be 1 to 64 characters")
    if problems:
        raise ConfigurationError("; ".join(problems))
    tenant_claim = (_claim(settings, "oidc_tenant_claim")
                    if settings.oidc_tenant_claim is not None else None)
    return OidcSettings(
        issuer=issuer,
        client_id=settings.oidc_client_id or "",
        client_secret=reveal(settings.oidc_client_secret) or "",
        redirect_url=redirect,
        role_map=parse_role_map(settings.oidc_role_map or ""),
        tenant=settings.oidc_tenant,
        tenant_claim=tenant_claim,
        scopes=scopes,
        groups_claim=_claim(settings, "oidc_groups_claim"),
        name_claim=_claim(settings, "oidc_name_claim"),
        provider_name=settings.oidc_provider_name.strip(),
        clock_skew_s=settings.oidc_clock_skew_seconds,
    )
