"""Secret input placeholders: what the log holds instead of a secret value, and revealing
them into a tool call's arguments. Shared by every :class:`events.saga_log.Secrets`
(``workers.secrets.SecretVault``, ``events.memory.MemorySecrets``), so both reveal alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from saga_core.errors import ErrorKind, SagaError

PLACEHOLDER_KEY: Final = "$secret"
"""The one key of a placeholder object: ``{"$secret": "<field>"}``."""


class SecretUnavailable(SagaError):
    """A secret a tool call needs is gone (purged, or never stored); the call cannot run."""

    kind = ErrorKind.NOT_FOUND


def placeholder(name: str) -> dict[str, str]:
    """What the log holds instead of the secret field ``name``."""
    return {PLACEHOLDER_KEY: name}


def reveal_with(
    saga_id: str, args: Any, fetch: Callable[[list[str]], Mapping[str, Any]]
) -> tuple[Any, dict[str, Any]]:
    """``args`` with every placeholder replaced by its value, and the revealed values by
    name; ``fetch`` (called only when a placeholder occurs) returns the stored values among
    the sorted names it is given. SecretUnavailable names any that are missing."""
    names = _placeholders(args)
    if not names:
        return args, {}
    values = dict(fetch(sorted(names)))
    missing = names - values.keys()
    if missing:
        raise SecretUnavailable(f"saga {saga_id}: secret input {sorted(missing)} is gone")
    return _substitute(args, values), values


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
