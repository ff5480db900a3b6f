"""The in-memory :class:`~application.secrets.port.Secrets`, held to the PostgreSQL vault's
contract by ``tests/contract``; it writes with a ``MemorySagaLog``'s units of work.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from application.secrets.placeholders import (
    SecretRefRejected,
    new_ref,
    ref_digest,
    ref_problem,
    reveal_with,
)
from events.eventstore.memory import MemoryUnit
from events.saga_log.port import Unit, unit_of


@dataclass
class _Deposit:
    """One deposited secret: whose, until when, and (once spent) by which saga."""

    tenant: str
    text: str | None  # JSON text; None once spent (the value moved to the saga)
    expires_at: datetime
    spent_by: str | None = None
    held_by: MemoryUnit | None = None  # an open unit redeeming it (until it ends)


class MemorySecrets:
    """Secret saga inputs in this process: kept with the unit that starts the saga."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str, str]] = {}  # saga id -> name -> JSON text
        self._deposits: dict[str, _Deposit] = {}  # ref digest -> deposit

    def keep(self, saga_id: str, secrets: Mapping[str, Any], unit: Unit) -> None:
        """Store values for a saga when ``unit`` applies; the first write wins, so a
        replayed start changes nothing."""
        if not secrets:
            return
        # As JSON text, as the database holds it: each reveal hands out its own copy, and
        # a value JSON cannot hold fails here, as it does in the PostgreSQL vault.
        texts = {name: json.dumps(value) for name, value in secrets.items()}
        unit_of(MemoryUnit, unit).on_commit(lambda: self._keep(saga_id, texts))

    def _keep(self, saga_id: str, texts: Mapping[str, str]) -> None:
        with self._lock:
            kept = self._values.setdefault(saga_id, {})
            for name, text in texts.items():
                kept.setdefault(name, text)

    def reveal(self, saga_id: str, args: Any) -> tuple[Any, dict[str, Any]]:
        """``args`` with every placeholder replaced by its value, and the revealed values."""
        return reveal_with(saga_id, args, lambda names: self._fetch(saga_id, names))

    def _fetch(self, saga_id: str, names: list[str]) -> dict[str, Any]:
        with self._lock:
            kept = dict(self._values.get(saga_id, {}))
        return {name: json.loads(kept[name]) for name in names if name in kept}

    def purge(self, saga_id: str) -> None:
        """Forget a finished saga's secrets."""
        with self._lock:
            self._values.pop(saga_id, None)

    def kept(self, saga_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The values kept for each of ``saga_ids``, by saga id and field (none: absent)."""
        with self._lock:
            texts = {saga_id: dict(self._values[saga_id]) for saga_id in saga_ids
                     if self._values.get(saga_id)}
        return {saga_id: {name: json.loads(text) for name, text in kept.items()}
                for saga_id, kept in texts.items()}

    def deposit(self, tenant: str, value: Any, expires_at: datetime) -> str:
        """Hold ``value`` for ``tenant`` until ``expires_at`` under a new ref (kept by its
        digest, as the database keeps it)."""
        ref = new_ref()
        text = json.dumps(value)
        with self._lock:
            self._deposits[ref_digest(ref)] = _Deposit(tenant, text, expires_at)
        return ref

    def redeem(
        self, tenant: str, refs: Mapping[str, str], saga_id: str, now: datetime, unit: Unit
    ) -> dict[str, Any]:
        """The values behind ``refs`` by field, each ref spent when ``unit`` commits. A ref
        another open unit is redeeming counts as spent (PostgreSQL would make this one
        wait for that unit's end instead)."""
        mine = unit_of(MemoryUnit, unit)
        mine.live()
        if not refs:
            return {}
        digests = {field: ref_digest(ref) for field, ref in refs.items()}
        with self._lock:
            states = {field: self._state(self._deposits.get(d), tenant, now, mine)
                      for field, d in digests.items()}
            refused = sorted(field for field, state in states.items() if state != "ok")
            if refused:
                raise SecretRefRejected([ref_problem(f, states[f]) for f in refused])
            texts = {}
            for field, digest in digests.items():
                deposit = self._deposits[digest]
                deposit.held_by = mine
                texts[field] = deposit.text
        mine.on_commit(lambda: self._spend(set(digests.values()), saga_id))
        return {field: json.loads(text) for field, text in texts.items() if text is not None}

    @staticmethod
    def _state(deposit: _Deposit | None, tenant: str, now: datetime, unit: MemoryUnit) -> str:
        if deposit is None or deposit.tenant != tenant:
            return "unknown"
        held = deposit.held_by is not None and deposit.held_by.open and deposit.held_by is not unit
        if deposit.spent_by is not None or held:
            return "used"
        return "expired" if deposit.expires_at <= now else "ok"

    def _spend(self, digests: set[str], saga_id: str) -> None:
        with self._lock:
            for digest in digests:
                deposit = self._deposits.get(digest)
                if deposit is not None:
                    deposit.text, deposit.spent_by, deposit.held_by = None, saga_id, None

    def purge_expired(self, now: datetime) -> int:
        """Forget every ref that expired by ``now``, spent or not."""
        with self._lock:
            gone = [d for d, deposit in self._deposits.items() if deposit.expires_at <= now]
            for digest in gone:
                del self._deposits[digest]
        return len(gone)


if TYPE_CHECKING:  # mypy checks that the class keeps its port's signatures
    from application.secrets.port import Secrets

    def _conforms(secrets: MemorySecrets) -> Secrets:
        return secrets
