"""Secret inputs: kept out of the log, the broker, read models and logs.

``SagaClient.start`` stores each secret field's value in ``fleet.secrets`` and records a
``{"$secret": "<field>"}`` placeholder in ``SagaStarted`` instead; templates resolve to the
placeholder (so request hashes and evidence never contain the value), and the executor
reveals it only in the arguments it passes to the tool. The sweeper purges a saga's
secrets when it finishes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from events import EventStore, UnitOfWork
from events.saga_log import Secrets, Unit, unit_of
from events.secret_inputs import PLACEHOLDER_KEY, SecretUnavailable, placeholder, reveal_with
from saga_core import SagaDefinition

__all__ = [
    "PLACEHOLDER_KEY",
    "SecretUnavailable",
    "SecretVault",
    "placeholder",
    "scrub",
    "split_secrets",
]


def split_secrets(
    definition: SagaDefinition, data: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The input with secret fields replaced by placeholders, and the secret values."""
    public: dict[str, Any] = {}
    secrets: dict[str, Any] = {}
    for name, value in data.items():
        spec = definition.input.get(name)
        if spec is not None and spec.secret:
            secrets[name] = value
            public[name] = placeholder(name)
        else:
            public[name] = value
    return public, secrets


class SecretVault:
    """The PostgreSQL :class:`~events.saga_log.Secrets`: values in ``fleet.secrets``."""

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


def scrub(text: str, args: Any) -> str:
    """``text`` with the string values of revealed secrets in ``args`` masked.

    Tool errors end up in the log (a failure's message, an unknown outcome's detail); an
    adapter that echoes its arguments must not carry a secret there.
    """
    for value in _strings(args):
        if len(value) >= 4 and value in text:
            text = text.replace(value, "[secret]")
    return text


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


if TYPE_CHECKING:  # mypy checks that the vault keeps the port's signatures

    def _conforms(vault: SecretVault) -> Secrets:
        return vault
