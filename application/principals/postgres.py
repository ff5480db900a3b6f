"""The principal directory in PostgreSQL: ``fleet.principals``, ``fleet.principal_tokens`` and
``fleet.signing_keys`` (migration ``0005_principals.sql``).

Every change is one transaction on the event store's pool; the principal's row is locked
(``FOR UPDATE``) by rotate, revoke and a new signing key, so a rotation racing a revoke
never leaves a live token behind a revoked principal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from application.principals.directory import (
    BAD_TOKEN,
    Issued,
    IssuedKey,
    PrincipalDirectory,
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
    token_matches,
)
from events import EventStore
from events.eventstore.model import Clock, utc_now
from saga_core.access.roles import Principal, PrincipalKind, Unauthenticated

__all__ = ["PostgresPrincipals"]

# A tenant's records, or (with a name) one: one literal statement for both, so no SQL is
# ever put together from pieces.
_RECORDS = (
    "SELECT p.tenant, p.name, p.kind, p.roles, p.created_at,"
    " (SELECT max(t.issued_at) FROM fleet.principal_tokens t"
    "   WHERE t.tenant = p.tenant AND t.name = p.name AND t.revoked_at IS NULL),"
    " p.revoked_at, p.revoked_reason,"
    " ARRAY(SELECT k.kid FROM fleet.signing_keys k WHERE k.tenant = p.tenant"
    "   AND k.name = p.name AND k.revoked_at IS NULL ORDER BY k.kid)"
    " FROM fleet.principals p"
    " WHERE p.tenant = %(tenant)s AND (%(name)s::text IS NULL OR p.name = %(name)s)"
    " ORDER BY p.name"
)


def _record(row: tuple[Any, ...]) -> PrincipalRecord:
    tenant, name, kind, roles, created, issued, revoked_at, reason, kids = row
    return PrincipalRecord(tenant, name, PrincipalKind(kind), frozenset(roles), created,
                           issued, revoked_at, reason, tuple(kids))


class PostgresPrincipals:
    """The :class:`~application.principals.directory.PrincipalDirectory` of a fleet's database."""

    def __init__(self, store: EventStore, clock: Clock = utc_now) -> None:
        """``store``: its pool carries every query; ``clock``: when things are recorded."""
        self._store = store
        self._clock = clock

    def add(self, tenant: str, name: str, kind: PrincipalKind | str,
            roles: Iterable[str]) -> Issued:
        """Add a principal and issue its first token."""
        principal = checked_principal(tenant, name, kind, roles)
        token, now = new_token(), self._clock()
        with self._store.transaction() as unit:
            conn = unit.connection
            added = conn.execute(
                "INSERT INTO fleet.principals (tenant, name, kind, roles, created_at)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING name",
                (tenant, name, principal.kind.value, sorted(principal.roles), now),
            ).fetchone()
            if added is None:
                raise taken(tenant, name)
            self._issue(conn, tenant, name, token, now)
        return Issued(principal, token)

    def authenticate(self, token: str) -> Principal:
        """The principal of a live token, or ``Unauthenticated``."""
        digest = token_digest(token)
        with self._store.connection() as conn:
            row = conn.execute(
                "SELECT t.token_digest, p.tenant, p.name, p.kind, p.roles"
                " FROM fleet.principal_tokens t JOIN fleet.principals p"
                "   ON p.tenant = t.tenant AND p.name = t.name"
                " WHERE t.token_digest = %s AND t.revoked_at IS NULL"
                "   AND p.revoked_at IS NULL",
                (digest,),
            ).fetchone()
        # Found by its digest (the sha256 of 256 random bits: the index lookup's timing
        # says nothing about a live token), then compared once more in constant time.
        if row is None or not token_matches(row[0], digest):
            raise Unauthenticated(BAD_TOKEN)
        _, tenant, name, kind, roles = row
        return Principal(tenant, name, PrincipalKind(kind), frozenset(roles))

    def rotate(self, tenant: str, name: str) -> Issued:
        """A new token for the principal; its old one stops working in the same commit."""
        checked_name(tenant, name)
        token, now = new_token(), self._clock()
        with self._store.transaction() as unit:
            conn = unit.connection
            record = self._locked_live(conn, tenant, name)
            conn.execute(
                "UPDATE fleet.principal_tokens SET revoked_at = %s"
                " WHERE tenant = %s AND name = %s AND revoked_at IS NULL",
                (now, tenant, name),
            )
            self._issue(conn, tenant, name, token, now)
        return Issued(record.principal(), token)

    def revoke(self, tenant: str, name: str, reason: str) -> PrincipalRecord:
        """Revoke the principal with its token and signing keys."""
        checked_name(tenant, name)
        reason = checked_reason(reason)
        now = self._clock()
        with self._store.transaction() as unit:
            conn = unit.connection
            record = self._locked(conn, tenant, name)
            if not record.revoked:
                conn.execute(
                    "UPDATE fleet.principals SET revoked_at = %s, revoked_reason = %s"
                    " WHERE tenant = %s AND name = %s", (now, reason, tenant, name))
                conn.execute(
                    "UPDATE fleet.principal_tokens SET revoked_at = %s"
                    " WHERE tenant = %s AND name = %s AND revoked_at IS NULL",
                    (now, tenant, name))
                conn.execute(
                    "UPDATE fleet.signing_keys SET revoked_at = %s"
                    " WHERE tenant = %s AND name = %s AND revoked_at IS NULL",
                    (now, tenant, name))
            return self._read(conn, tenant, name)

    def get(self, tenant: str, name: str) -> PrincipalRecord:
        """One principal's record."""
        checked_name(tenant, name)
        with self._store.connection() as conn:
            return self._read(conn, tenant, name)

    def list(self, tenant: str) -> Sequence[PrincipalRecord]:
        """The tenant's principals by name."""
        with self._store.connection() as conn:
            rows = conn.execute(_RECORDS, {"tenant": tenant, "name": None}).fetchall()
        return [_record(row) for row in rows]

    def add_signing_key(self, tenant: str, name: str,
                        public_key: bytes | None = None) -> IssuedKey:
        """Record (or generate) an Ed25519 key for the principal; only the public half is
        kept."""
        checked_name(tenant, name)
        private_pem, raw = (None, public_key_bytes(public_key)) if public_key is not None \
            else new_key_pair()
        kid = new_kid()
        with self._store.transaction() as unit:
            conn = unit.connection
            record = self._locked_live(conn, tenant, name)
            conn.execute(
                "INSERT INTO fleet.signing_keys (kid, tenant, name, public_key, created_at)"
                " VALUES (%s, %s, %s, %s, %s)", (kid, tenant, name, raw, self._clock()))
        return IssuedKey(kid, record.principal(), private_pem)

    def signing_key(self, kid: str) -> SigningKey | None:
        """The live key ``kid``, or None."""
        if not kid_is_well_formed(kid):
            return None
        with self._store.connection() as conn:
            row = conn.execute(
                "SELECT k.public_key, p.tenant, p.name, p.kind, p.roles"
                " FROM fleet.signing_keys k JOIN fleet.principals p"
                "   ON p.tenant = k.tenant AND p.name = k.name"
                " WHERE k.kid = %s AND k.revoked_at IS NULL AND p.revoked_at IS NULL",
                (kid,),
            ).fetchone()
        if row is None:
            return None
        public, tenant, name, kind, roles = row
        return SigningKey(kid, Principal(tenant, name, PrincipalKind(kind), frozenset(roles)),
                          bytes(public))

    def revoke_signing_key(self, kid: str) -> None:
        """Revoke one signing key (a second revoke keeps the first time)."""
        if not kid_is_well_formed(kid):
            raise PrincipalNotFound(f"no signing key {kid!r}")
        with self._store.connection() as conn:
            found = conn.execute(
                "UPDATE fleet.signing_keys SET revoked_at = coalesce(revoked_at, %s)"
                " WHERE kid = %s RETURNING kid", (self._clock(), kid)).fetchone()
        if found is None:
            raise PrincipalNotFound(f"no signing key {kid!r}")

    # -- inside a transaction

    @staticmethod
    def _issue(conn: Any, tenant: str, name: str, token: str, now: datetime) -> None:
        conn.execute(
            "INSERT INTO fleet.principal_tokens (token_digest, tenant, name, issued_at)"
            " VALUES (%s, %s, %s, %s)", (token_digest(token), tenant, name, now))

    def _locked(self, conn: Any, tenant: str, name: str) -> PrincipalRecord:
        if conn.execute("SELECT 1 FROM fleet.principals WHERE tenant = %s AND name = %s"
                        " FOR UPDATE", (tenant, name)).fetchone() is None:
            raise not_found(tenant, name)
        return self._read(conn, tenant, name)

    def _locked_live(self, conn: Any, tenant: str, name: str) -> PrincipalRecord:
        record = self._locked(conn, tenant, name)
        if record.revoked:
            raise revoked(tenant, name)
        return record

    @staticmethod
    def _read(conn: Any, tenant: str, name: str) -> PrincipalRecord:
        row = conn.execute(_RECORDS, {"tenant": tenant, "name": name}).fetchone()
        if row is None:
            raise not_found(tenant, name)
        return _record(row)


if TYPE_CHECKING:  # mypy checks that both directories keep the port's signatures
    from application.principals.memory import MemoryPrincipals

    def _conforms(pg: PostgresPrincipals, memory: MemoryPrincipals) -> list[PrincipalDirectory]:
        return [pg, memory]
