"""Secret inputs at a start: which fields are secret, what crosses the broker (refs only), and
what the log holds instead of a value.

``SagaClient.start`` stores each secret field's value in the vault
(:mod:`application.secrets.postgres`) and records a ``{"$secret": "<field>"}`` placeholder
in ``SagaStarted`` instead; templates resolve to the placeholder, and only a tool call's
arguments get the value back. A broker command holding a raw value in a secret field is
refused (:func:`raw_secret_problems`) and dead-lettered with every secret value withheld.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from application.secrets.placeholders import is_secret_ref, placeholder, secret_ref
from saga_core import SagaDefinition
from saga_core.definitions.inputs import field_problems
from saga_core.errors import InputValidationError, Problem
from saga_core.secret_scrub import SecretNeedles, scrub_text


class SecretRef(BaseModel):
    """A deposited secret: put :meth:`as_input` in the secret field of a start's input."""

    model_config = ConfigDict(frozen=True)

    ref: str
    expires_at: datetime

    def as_input(self) -> dict[str, str]:
        """``{"$secret_ref": ref}``, what the secret field carries instead of the value."""
        return secret_ref(self.ref)


class RawSecretRefused(InputValidationError):
    """A command that crossed the broker holds a value in a field the definition marks
    secret; ``problems`` names each field. The value must come by ref instead."""

    hint = ("store the secret first (MCP put_secret, SagaClient.put_secret or `sagafleet "
            'secrets put`) and send {"$secret_ref": "<ref>"} in the field instead')


def checked_values(definition: SagaDefinition, values: Mapping[str, Any]) -> dict[str, Any]:
    """Values redeemed from refs, checked against their fields as an input's would be
    (InputValidationError naming each bad field; the messages never show a value)."""
    problems = [problem for name, value in values.items()
                for problem in field_problems(name, definition.input[name], value)]
    if problems:
        raise InputValidationError(definition.name, problems)
    return dict(values)


def raw_secret_problems(definition: SagaDefinition, data: Any) -> list[Problem]:
    """The secret fields of ``data`` that hold a value rather than a ref."""
    if not isinstance(data, dict):
        return []
    return [
        Problem(f"input.{name}", "secret_over_broker",
                "a secret value must not cross the broker: put it with put_secret (MCP), "
                "SagaClient.put_secret or `sagafleet secrets put`, and send "
                '{"$secret_ref": "<ref>"} here')
        for name, value in data.items()
        if (spec := definition.input.get(name)) is not None and spec.secret
        and not is_secret_ref(value)
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


def scrub(text: str, args: Any) -> str:
    """``text`` (meant for people) with every secret value in ``args`` masked (see
    ``saga_core.secret_scrub``: what the executor does to a tool's error text)."""
    return scrub_text(text, SecretNeedles.of([args])).value
