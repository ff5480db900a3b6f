"""The principal directory: who the people and agents of each tenant are, and how they prove it.

A principal (``saga_core.access.roles.Principal``) is added to a tenant with a kind and roles,
and is issued an API token, shown once (:class:`Issued`): the directory keeps only the
token's sha256 digest, so a copy of its tables lets nobody act. :meth:`authenticate
<PrincipalDirectory.authenticate>` turns a token back into its principal, or raises
``saga_core.access.roles.Unauthenticated`` with one message whatever was wrong (unknown, revoked,
malformed), so a caller learns nothing from the refusal. A principal may hold Ed25519
signing keys for signed Celery commands (the directory keeps only the public key; a generated
private key is returned once, in :class:`IssuedKey`). Revoking a principal stops its token
and every signing key at once; a revoked name stays taken, so the events that record it as
an actor always name one principal.

Two implementations keep the same promises (``tests/contract/test_contract_principals.py``):
:class:`application.principals.postgres.PostgresPrincipals` (tables ``fleet.principals``,
``fleet.principal_tokens``, ``fleet.signing_keys``) and
:class:`application.principals.memory.MemoryPrincipals` (``sagafleet.testing``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Protocol

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from saga_core.access.roles import Principal, PrincipalKind, Unauthenticated, role_problems
from saga_core.errors import ErrorKind, SagaError
from saga_core.limits import NAME_CHARS, REASON_CHARS

__all__ = [
    "TOKEN_PREFIX",
    "KEY_PREFIX",
    "BAD_TOKEN",
    "InvalidPrincipal",
    "Issued",
    "IssuedKey",
    "PrincipalConflict",
    "PrincipalDirectory",
    "PrincipalNotFound",
    "PrincipalRecord",
    "SigningKey",
    "new_kid",
    "new_token",
    "principal_problems",
    "public_key_bytes",
    "token_digest",
    "token_matches",
]

TOKEN_PREFIX: Final = "sft_"
"""Every API token starts so: a leaked one is recognisable (secret scanners, logs)."""
TOKEN_BYTES: Final = 32
"""Random bytes in a token (256 bits: unguessable, so one sha256 is a safe digest)."""
_TOKEN_SHAPE: Final = re.compile(r"^sft_[A-Za-z0-9_\-]{43}$")
KEY_PREFIX: Final = "sk_"
"""Every signing key id starts so."""
_KID_SHAPE: Final = re.compile(r"^sk_[A-Za-z0-9_\-]{22}$")
BAD_TOKEN: Final = "the token is not valid: unknown, revoked or malformed"
"""The one message of every refused token: the refusal says nothing about which it was."""
PRINCIPAL_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+\-]*\Z")
"""A principal's (and a tenant's) name: what events record as the actor."""


class PrincipalConflict(SagaError):
    """The name is taken in this tenant (revoked names stay taken), or the principal is
    revoked and cannot be given a new credential."""

    kind = ErrorKind.CONFLICT


class PrincipalNotFound(SagaError):
    """No principal of that name in that tenant (or no signing key of that id)."""

    kind = ErrorKind.NOT_FOUND
    hint = "list the tenant's principals with `sagafleet principals list`"


class InvalidPrincipal(SagaError):
    """A principal's name, tenant, kind, roles or public key is malformed; names each."""

    kind = ErrorKind.INVALID_INPUT


@dataclass(frozen=True)
class Issued:
    """A principal and its new API token: the only time the token is ever shown."""

    principal: Principal
    token: str = field(repr=False)  # never in a log line or a traceback's locals repr


@dataclass(frozen=True)
class IssuedKey:
    """A new signing key's id and, when the directory generated the pair, its private key
    (PKCS#8 PEM, unencrypted): shown once, never kept."""

    kid: str
    principal: Principal
    private_key_pem: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SigningKey:
    """A live signing key: its principal and its raw 32-byte Ed25519 public key."""

    kid: str
    principal: Principal
    public_key: bytes


@dataclass(frozen=True)
class PrincipalRecord:
    """What the directory shows of a principal (never a token): who, since when, whether
    revoked and why, and the ids of its live signing keys."""

    tenant: str
    name: str
    kind: PrincipalKind
    roles: frozenset[str]
    created_at: datetime
    token_issued_at: datetime | None
    revoked_at: datetime | None = None
    revoked_reason: str | None = None
    signing_keys: tuple[str, ...] = ()

    @property
    def revoked(self) -> bool:
        """Whether the principal was revoked (its token and keys no longer work)."""
        return self.revoked_at is not None

    def principal(self) -> Principal:
        """The principal this record describes (as a token would prove it)."""
        return Principal(self.tenant, self.name, self.kind, self.roles)


class PrincipalDirectory(Protocol):
    """The port: the principals of every tenant, their tokens and signing keys."""

    def add(self, tenant: str, name: str, kind: PrincipalKind | str,
            roles: Iterable[str]) -> Issued:
        """Add a principal and issue its first token (:class:`PrincipalConflict` when the
        name is taken, :class:`InvalidPrincipal` naming each bad field)."""
        ...

    def authenticate(self, token: str) -> Principal:
        """The principal a live token belongs to, or ``Unauthenticated`` (:data:`BAD_TOKEN`)."""
        ...

    def rotate(self, tenant: str, name: str) -> Issued:
        """Issue a new token; the old one stops working at once."""
        ...

    def revoke(self, tenant: str, name: str, reason: str) -> PrincipalRecord:
        """Revoke a principal: its token and signing keys stop working (a second revoke
        changes nothing and keeps the first reason)."""
        ...

    def get(self, tenant: str, name: str) -> PrincipalRecord:
        """One principal's record, revoked or not (:class:`PrincipalNotFound`)."""
        ...

    def list(self, tenant: str) -> Sequence[PrincipalRecord]:
        """Every principal of ``tenant``, revoked ones too, by name."""
        ...

    def add_signing_key(self, tenant: str, name: str,
                        public_key: bytes | None = None) -> IssuedKey:
        """Record an Ed25519 public key (raw 32 bytes or PEM) for the principal, or generate
        a pair and return its private key once."""
        ...

    def signing_key(self, kid: str) -> SigningKey | None:
        """The live key ``kid``; None when unknown, revoked, or its principal is revoked."""
        ...

    def revoke_signing_key(self, kid: str) -> None:
        """Revoke one signing key (:class:`PrincipalNotFound` for an unknown id)."""
        ...


# -- tokens and keys: made here, kept by the implementations -------------------------------


def new_token() -> str:
    """A fresh API token: the prefix and 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_digest(token: str) -> str:
    """What a directory keeps instead of the token (sha256, hex). Raises ``Unauthenticated``
    for anything not shaped like a token, before it reaches a store."""
    if not isinstance(token, str) or not _TOKEN_SHAPE.match(token):
        raise Unauthenticated(BAD_TOKEN)
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def token_matches(stored_digest: str, token_digest_given: str) -> bool:
    """Compare two digests in constant time (a found row is checked once more, so no
    timing of the comparison says how much of a digest was right)."""
    return hmac.compare_digest(stored_digest.encode("ascii"), token_digest_given.encode("ascii"))


def new_kid() -> str:
    """A fresh signing key id (public: it travels with every signed command)."""
    return KEY_PREFIX + secrets.token_urlsafe(16)


def kid_is_well_formed(kid: object) -> bool:
    """Whether ``kid`` could be a signing key id (others are never looked up)."""
    return isinstance(kid, str) and bool(_KID_SHAPE.match(kid))


def public_key_bytes(public_key: bytes) -> bytes:
    """The raw 32 bytes of an Ed25519 public key given raw or as PEM
    (:class:`InvalidPrincipal` for anything else)."""
    if not isinstance(public_key, bytes | bytearray):
        raise InvalidPrincipal("public key must be bytes: raw 32-byte Ed25519 or PEM")
    data = bytes(public_key)
    if len(data) == 32:
        try:  # a key that is no one's loads too, and then verifies nothing
            Ed25519PublicKey.from_public_bytes(data)
        except ValueError:
            raise InvalidPrincipal("public key is not an Ed25519 public key") from None
        return data
    try:
        loaded = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidPrincipal(
            "public key is neither 32 raw bytes nor a PEM public key") from None
    if not isinstance(loaded, Ed25519PublicKey):
        raise InvalidPrincipal("public key must be an Ed25519 key")
    return loaded.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def new_key_pair() -> tuple[bytes, bytes]:
    """A fresh Ed25519 pair: (private key as PKCS#8 PEM, raw 32-byte public key)."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = private.public_key().public_bytes(serialization.Encoding.Raw,
                                               serialization.PublicFormat.Raw)
    return pem, public


# -- what a directory checks before it writes ---------------------------------------------


def name_problems(what: str, value: object) -> list[str]:
    """Why ``value`` is not a valid tenant or principal name (empty when it is)."""
    if not isinstance(value, str) or not value:
        return [f"{what} must be a non-empty text"]
    if len(value) > NAME_CHARS.value:
        return [f"{what} is {len(value)} characters; at most {NAME_CHARS.value} (name_chars)"]
    if not PRINCIPAL_NAME.match(value):
        return [f"{what} {value!r} must match {PRINCIPAL_NAME.pattern}"]
    return []


def principal_problems(tenant: object, name: object, kind: object,
                       roles: Iterable[str]) -> list[str]:
    """Every reason a principal cannot be added as given (empty when it can)."""
    problems = name_problems("tenant", tenant) + name_problems("name", name)
    if kind not in PrincipalKind._value2member_map_:
        problems.append(f"kind {kind!r} must be one of {[k.value for k in PrincipalKind]}")
    roles = list(roles)
    if not roles:
        problems.append("give at least one role (a principal without one may do nothing)")
    problems += role_problems(roles)
    return problems


def checked_principal(tenant: str, name: str, kind: PrincipalKind | str,
                      roles: Iterable[str]) -> Principal:
    """The principal to add, or :class:`InvalidPrincipal` naming every problem."""
    if isinstance(roles, str):  # a single role given bare would become its letters
        roles = [roles]
    roles = list(roles)
    problems = principal_problems(tenant, name, kind, roles)
    if problems:
        raise InvalidPrincipal("; ".join(problems))
    return Principal(tenant, name, PrincipalKind(kind), frozenset(roles))


def checked_reason(reason: object) -> str:
    """A revocation's reason (any text up to ``reason_chars``)."""
    if not isinstance(reason, str) or len(reason) > REASON_CHARS.value:
        raise InvalidPrincipal(f"reason must be a text of at most {REASON_CHARS.value} "
                               "characters (reason_chars)")
    return reason


def checked_name(tenant: object, name: object) -> None:
    """:class:`PrincipalNotFound` for a tenant or name that no principal could have."""
    if name_problems("tenant", tenant) or name_problems("name", name):
        raise PrincipalNotFound(f"no principal {name!r} in tenant {tenant!r}")


def not_found(tenant: str, name: str) -> PrincipalNotFound:
    """The error for a principal the directory does not hold."""
    return PrincipalNotFound(f"no principal {name!r} in tenant {tenant!r}")


def revoked(tenant: str, name: str) -> PrincipalConflict:
    """The error for a new credential asked for a revoked principal."""
    return PrincipalConflict(f"principal {name!r} of tenant {tenant!r} is revoked; add a "
                             "principal under a new name instead")


def taken(tenant: str, name: str) -> PrincipalConflict:
    """The error for a name already taken in the tenant."""
    return PrincipalConflict(f"tenant {tenant!r} already has a principal {name!r} (names "
                             "stay taken after a revoke, so the log's actors stay unambiguous)")
