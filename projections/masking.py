"""Keep secret inputs (``InputField.secret``) out of every read model and audit output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from saga_core.definitions.definition import SagaDefinition

MASK: Final = "***"
"""What a secret value is replaced with."""

# A secret shorter than this is masked only where it is a whole value: replacing a
# one- or two-character substring everywhere would garble unrelated text.
_MIN_SUBSTRING = 4


def secret_values(definition: SagaDefinition, saga_input: Mapping[str, Any]) -> tuple[str, ...]:
    """The saga's secret input values as text, longest first (so overlaps mask fully)."""
    found = {
        str(saga_input[name])
        for name, spec in definition.input.items()
        if spec.secret and name in saga_input and saga_input[name] not in (None, "")
    }
    return tuple(sorted(found, key=len, reverse=True))


def mask_input(definition: SagaDefinition, saga_input: Mapping[str, Any]) -> dict[str, Any]:
    """A saga input with every field declared secret replaced by the mask."""
    return {
        name: MASK if (spec := definition.input.get(name)) is not None and spec.secret else value
        for name, value in saga_input.items()
    }


def mask(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` (any JSON-like structure) with every occurrence of a secret masked."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if value == secret:
                return MASK
            if len(secret) >= _MIN_SUBSTRING and secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, Mapping):
        return {key: mask(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask(item, secrets) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool) and str(value) in secrets:
        return MASK
    return value
