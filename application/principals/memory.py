"""The in-memory principal directory (``sagafleet.testing``): the PostgreSQL one's promises,
held by the same contract tests, in dictionaries behind one lock."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from application.principals.directory import (
    BAD_TOKEN,
    Issued,
    IssuedKey,
    PrincipalNotFound,
    PrincipalRecord,
    SigningKey,
    checked_name,
    checked_principal,
    checked_reason,
    kid_is_well_formed,
    new_key_pair,
    new_kid,
    new_token,
    not_found,
    public_key_bytes,
    revoked,
    taken,
    token_digest,
)
from events.eventstore.model import Clock, utc_now
from saga_core.access.roles import Principal, PrincipalKind, Unauthenticated

__all__ = ["MemoryPrincipals"]


@dataclass(frozen=True)
class _Key:
    kid: str
    tenant: str
    name: str
    public_key: bytes
    revoked: bool = False


class MemoryPrincipals:
    """A :class:`~application.principals.directory.PrincipalDirectory` in memory: digests, never
    tokens."""

    def __init__(self, clock: Clock = utc_now) -> None:
        """``clock``: when principals are added, tokens issued and revocations made."""
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], PrincipalRecord] = {}
        self._tokens: dict[str, tuple[str, str]] = {}  # live token digest -> (tenant, name)
        self._keys: dict[str, _Key] = {}

    def add(self, tenant: str, name: str, kind: PrincipalKind | str,
            roles: Iterable[str]) -> Issued:
        """Add a principal and issue its first token."""
        principal = checked_principal(tenant, name, kind, roles)
        token, now = new_token(), self._clock()
        with self._lock:
            if (tenant, name) in self._records:
                raise taken(tenant, name)
            self._records[tenant, name] = PrincipalRecord(
                tenant, name, principal.kind, principal.roles, now, now)
            self._tokens[token_digest(token)] = (tenant, name)
        return Issued(principal, token)

    def authenticate(self, token: str) -> Principal:
        """The principal of a live token, or ``Unauthenticated``."""
        digest = token_digest(token)
        with self._lock:
            # Found by its digest (the sha256 of 256 random bits): how long the lookup
            # takes says nothing about any live token.
            owner = self._tokens.get(digest)
            record = self._records.get(owner) if owner else None
        if record is None or record.revoked:
            raise Unauthenticated(BAD_TOKEN)
        return record.principal()

    def rotate(self, tenant: str, name: str) -> Issued:
        """A new token for the principal; its old one stops working."""
        checked_name(tenant, name)
        token, now = new_token(), self._clock()
        with self._lock:
            record = self._live(tenant, name)
            self._forget_tokens(tenant, name)
            self._tokens[token_digest(token)] = (tenant, name)
            self._records[tenant, name] = replace(record, token_issued_at=now)
        return Issued(record.principal(), token)

    def revoke(self, tenant: str, name: str, reason: str) -> PrincipalRecord:
        """Revoke the principal with its token and signing keys."""
        checked_name(tenant, name)
        reason = checked_reason(reason)
        with self._lock:
            record = self._records.get((tenant, name))
            if record is None:
                raise not_found(tenant, name)
            if not record.revoked:
                self._forget_tokens(tenant, name)
                for kid, key in list(self._keys.items()):
                    if (key.tenant, key.name) == (tenant, name):
                        self._keys[kid] = replace(key, revoked=True)
                record = replace(record, revoked_at=self._clock(), revoked_reason=reason)
                self._records[tenant, name] = record
            return self._with_keys(record)

    def get(self, tenant: str, name: str) -> PrincipalRecord:
        """One principal's record."""
        checked_name(tenant, name)
        with self._lock:
            record = self._records.get((tenant, name))
            if record is None:
                raise not_found(tenant, name)
            return self._with_keys(record)

    def list(self, tenant: str) -> Sequence[PrincipalRecord]:
        """The tenant's principals by name."""
        with self._lock:
            return [self._with_keys(record) for (owner, _), record in sorted(
                self._records.items()) if owner == tenant]

    def add_signing_key(self, tenant: str, name: str,
                        public_key: bytes | None = None) -> IssuedKey:
        """Record (or generate) an Ed25519 key for the principal."""
        checked_name(tenant, name)
        private_pem, raw = (None, public_key_bytes(public_key)) if public_key is not None \
            else new_key_pair()
        kid = new_kid()
        with self._lock:
            record = self._live(tenant, name)
            self._keys[kid] = _Key(kid, tenant, name, raw)
        return IssuedKey(kid, record.principal(), private_pem)

    def signing_key(self, kid: str) -> SigningKey | None:
        """The live key ``kid``, or None."""
        if not kid_is_well_formed(kid):
            return None
        with self._lock:
            key = self._keys.get(kid)
            record = self._records.get((key.tenant, key.name)) if key else None
        if key is None or key.revoked or record is None or record.revoked:
            return None
        return SigningKey(kid, record.principal(), key.public_key)

    def revoke_signing_key(self, kid: str) -> None:
        """Revoke one signing key."""
        with self._lock:
            key = self._keys.get(kid) if kid_is_well_formed(kid) else None
            if key is None:
                raise PrincipalNotFound(f"no signing key {kid!r}")
            self._keys[kid] = replace(key, revoked=True)

    # -- under the lock

    def _live(self, tenant: str, name: str) -> PrincipalRecord:
        record = self._records.get((tenant, name))
        if record is None:
            raise not_found(tenant, name)
        if record.revoked:
            raise revoked(tenant, name)
        return record

    def _forget_tokens(self, tenant: str, name: str) -> None:
        for digest in [d for d, who in self._tokens.items() if who == (tenant, name)]:
            del self._tokens[digest]

    def _with_keys(self, record: PrincipalRecord) -> PrincipalRecord:
        kids = tuple(sorted(k.kid for k in self._keys.values()
                            if (k.tenant, k.name) == (record.tenant, record.name)
                            and not k.revoked))
        return replace(record, signing_keys=kids)
