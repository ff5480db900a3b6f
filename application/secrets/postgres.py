"""The PostgreSQL :class:`~application.secrets.port.Secrets`: values in ``fleet.secrets``
(purged when the saga finishes) and single-use refs in ``fleet.secret_refs`` (kept only as
digests, per tenant, until they expire).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from application.secrets.placeholders import (
    SecretRefRejected,
    new_ref,
    ref_digest,
    ref_problem,
    reveal_with,
)
from events import EventStore, UnitOfWork
from events.saga_log.port import Unit, unit_of


class SecretVault:
    """The PostgreSQL :class:`~application.secrets.port.Secrets`: values in ``fleet.secrets``."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def keep(self, saga_id: str, secrets: Mapping[str, Any], unit: Unit) -> None:
        """Store values for a saga in the caller's unit of work (the one that starts it);
        the first write wins, so a replayed start changes nothing."""
        if not secrets:
            return
        with unit_of(UnitOfWork, unit).connection.cursor() as cur:
            cur.executemany(
                "INSERT INTO fleet.secrets (saga_id, name, value) VALUES (%s, %s, %s::jsonb)"
                " ON CONFLICT (saga_id, name) DO NOTHING",
                [(saga_id, name, json.dumps(value)) for name, value in secrets.items()],
            )

    def reveal(self, saga_id: str, args: Any) -> tuple[Any, dict[str, Any]]:
        """``args`` with every placeholder replaced by its value (one query, only if needed),
        and the revealed values by name."""
        return reveal_with(saga_id, args, lambda names: self._fetch(saga_id, names))

    def _fetch(self, saga_id: str, names: list[str]) -> dict[str, Any]:
        with self._store.connection() as conn:
            rows = conn.execute(
                "SELECT name, value FROM fleet.secrets WHERE saga_id = %s AND name = ANY(%s)",
                (saga_id, names),
            ).fetchall()
        return {name: value for name, value in rows}

    def purge(self, saga_id: str, conn: Any = None) -> None:
        """Forget a finished saga's secrets (optionally on the caller's connection)."""
        if conn is not None:
            conn.execute("DELETE FROM fleet.secrets WHERE saga_id = %s", (saga_id,))
            return
        with self._store.connection() as own:
            own.execute("DELETE FROM fleet.secrets WHERE saga_id = %s", (saga_id,))

    def kept(self, saga_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The values kept for each of ``saga_ids``, by saga id and field (none: absent)."""
        if not saga_ids:
            return {}
        with self._store.connection() as conn:
            rows = conn.execute(
                "SELECT saga_id, name, value FROM fleet.secrets WHERE saga_id = ANY(%s)",
                (list(saga_ids),),
            ).fetchall()
        kept: dict[str, dict[str, Any]] = {}
        for saga_id, name, value in rows:
            kept.setdefault(saga_id, {})[name] = value
        return kept

    def deposit(self, tenant: str, value: Any, expires_at: datetime) -> str:
        """Hold ``value`` for ``tenant`` until ``expires_at`` under a new ref (its digest
        is the key: the table holds no usable ref)."""
        ref = new_ref()
        text = json.dumps(value)
        with self._store.connection() as conn:
            conn.execute(
                "INSERT INTO fleet.secret_refs (ref_digest, tenant, value, expires_at)"
                " VALUES (%s, %s, %s::jsonb, %s)",
                (ref_digest(ref), tenant, text, expires_at),
            )
        return ref

    def redeem(
        self, tenant: str, refs: Mapping[str, str], saga_id: str, now: datetime, unit: Unit
    ) -> dict[str, Any]:
        """Spend each ref in the caller's unit and return the values by field. A concurrent
        start on the same ref waits for this unit's row lock, then finds it spent."""
        if not refs:
            return {}
        digests = {field: ref_digest(ref) for field, ref in refs.items()}
        wanted = sorted(set(digests.values()))
        conn = unit_of(UnitOfWork, unit).connection
        rows = conn.execute(
            "WITH taken AS (SELECT ref_digest, value FROM fleet.secret_refs"
            "  WHERE ref_digest = ANY(%s) AND tenant = %s AND spent_by IS NULL"
            "  AND expires_at > %s ORDER BY ref_digest FOR UPDATE)"
            " UPDATE fleet.secret_refs AS r SET value = NULL, spent_by = %s, spent_at = %s"
            " FROM taken WHERE r.ref_digest = taken.ref_digest"
            " RETURNING taken.ref_digest, taken.value",
            (wanted, tenant, now, saga_id, now),
        ).fetchall()
        values = {digest: value for digest, value in rows}
        missing = {field for field, digest in digests.items() if digest not in values}
        if missing:
            states = conn.execute(
                "SELECT ref_digest, tenant, expires_at, spent_by FROM fleet.secret_refs"
                " WHERE ref_digest = ANY(%s)",
                ([digests[field] for field in missing],),
            ).fetchall()
            found = {digest: (owner, expires, spent) for digest, owner, expires, spent in states}
            raise SecretRefRejected([
                ref_problem(field, _ref_state(found.get(digests[field]), tenant, now))
                for field in sorted(missing)
            ])
        return {field: values[digest] for field, digest in digests.items()}

    def purge_expired(self, now: datetime) -> int:
        """Delete every ref that expired by ``now``, spent or not."""
        with self._store.connection() as conn:
            cur = conn.execute("DELETE FROM fleet.secret_refs WHERE expires_at <= %s", (now,))
            return cur.rowcount


def _ref_state(found: tuple[str, datetime, str | None] | None, tenant: str,
               now: datetime) -> str:
    """Why a ref could not be redeemed; another tenant's ref reads as unknown."""
    if found is None or found[0] != tenant:
        return "unknown"
    if found[2] is not None:
        return "used"
    return "expired" if found[1] <= now else "used"  # spent by a unit that just committed


if TYPE_CHECKING:  # mypy checks that the vault keeps the port's signatures
    from application.secrets.port import Secrets

    def _conforms(vault: SecretVault) -> Secrets:
        return vault
