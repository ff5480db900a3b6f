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
from typing import Any

from events import EventStore
from saga_core import SagaDefinition
from saga_core.errors import ErrorKind, SagaError

PLACEHOLDER_KEY = "$secret"


class SecretUnavailable(SagaError):
    """A secret a tool call needs is gone (purged, or never stored); the call cannot run."""
    kind = ErrorKind.NOT_FOUND


def placeholder(name: str) -> dict[str, str]:
    """What the log holds instead of the secret field ``name``."""
    return {PLACEHOLDER_KEY: name}


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
    """Stores, reveals and purges secret input values by saga."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def keep(self, saga_id: str, secrets: Mapping[str, Any], conn: Any) -> None:
        """Store values for a saga in the caller's transaction (the one that starts it);
        the first write wins, so a replayed start changes nothing."""
        if not secrets:
            return
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO fleet.secrets (saga_id, name, value) VALUES (%s, %s, %s::jsonb)"
                " ON CONFLICT (saga_id, name) DO NOTHING",
                [(saga_id, name, json.dumps(value)) for name, value in secrets.items()],
            )

    def reveal(self, saga_id: str, args: Any) -> tuple[Any, dict[str, Any]]:
        """``args`` with every placeholder replaced by its value (one query, only if needed),
        and the revealed values by name."""
        names = _placeholders(args)
        if not names:
            return args, {}
        with self._store.connection() as conn:
            rows = conn.execute(
                "SELECT name, value FROM fleet.secrets WHERE saga_id = %s AND name = ANY(%s)",
                (saga_id, sorted(names)),
            ).fetchall()
        values = {name: value for name, value in rows}
        missing = names - values.keys()
        if missing:
            raise SecretUnavailable(f"saga {saga_id}: secret input {sorted(missing)} is gone")
        return _substitute(args, values), values

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


def _is_placeholder(value: Any) -> bool:
    return (isinstance(value, dict) and len(value) == 1
            and isinstance(value.get(PLACEHOLDER_KEY), str))


def _placeholders(value: Any) -> set[str]:
    if _is_placeholder(value):
        return {value[PLACEHOLDER_KEY]}
    if isinstance(value, dict):
        return set().union(*(_placeholders(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_placeholders(v) for v in value)) if value else set()
    return set()


def _substitute(value: Any, values: Mapping[str, Any]) -> Any:
    if _is_placeholder(value):
        return values[value[PLACEHOLDER_KEY]]
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    return value
