"""Secret input placeholders and refs, shared by every :class:`application.secrets.port.Secrets`
(``application.secrets.postgres.SecretVault``, ``application.secrets.memory.MemorySecrets``), so
both behave alike.

* A **placeholder** ``{"$secret": "<field>"}`` is what the log holds instead of a secret
  value; :func:`reveal_with` puts the value back into a tool call's arguments only.
* A **ref** ``{"$secret_ref": "sr_…"}`` is what a caller sends instead of a secret value it
  stored beforehand (``SagaClient.put_secret``): an unguessable, single-use id, bound to one
  tenant, with an expiry. Stores keep only its sha256 (:func:`ref_digest`), so a copy of
  the table holds no usable ref. Starting a saga redeems it: the value moves into the
  saga's secrets in the start's own unit of work and the ref is spent.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

from saga_core.definitions.definition import SagaDefinition
from saga_core.errors import ErrorKind, Problem, ProblemsError, SagaError

PLACEHOLDER_KEY: Final = "$secret"
"""The one key of a placeholder object: ``{"$secret": "<field>"}``."""

REF_KEY: Final = "$secret_ref"
"""The one key of a ref object: ``{"$secret_ref": "sr_…"}``."""

_REF_SHAPE = re.compile(r"^sr_[A-Za-z0-9_-]{43}$")  # "sr_" + 32 random bytes, base64url


class SecretRefRejected(ProblemsError):
    """A secret field's ref cannot be used: malformed, unknown to this tenant, expired or
    already spent; ``problems`` names each such field (``input.<field>``)."""

    hint = ("store the secret again (MCP put_secret, SagaClient.put_secret or `sagafleet "
            "secrets put`) and send the new ref; a ref is used by one start only")

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("secret input refused", problems)


def new_ref() -> str:
    """A fresh unguessable ref id (256 random bits)."""
    return "sr_" + secrets.token_urlsafe(32)


def ref_digest(ref: str) -> str:
    """What a store keeps instead of the ref itself."""
    return hashlib.sha256(ref.encode("ascii")).hexdigest()


def secret_ref(ref: str) -> dict[str, str]:
    """The object a caller puts in a secret field instead of the value."""
    return {REF_KEY: ref}


def is_secret_ref(value: Any) -> bool:
    """Whether ``value`` is a ref object (one ``$secret_ref`` key)."""
    return isinstance(value, dict) and len(value) == 1 and REF_KEY in value


def refs_in(definition: SagaDefinition, data: Any) -> dict[str, str]:
    """The fields of ``data`` given by ref (field -> ref id); SecretRefRejected names every
    ref that is malformed or sits in a field the definition does not mark secret."""
    if not isinstance(data, dict):
        return {}
    refs: dict[str, str] = {}
    problems: list[Problem] = []
    for name, value in data.items():
        if not is_secret_ref(value):
            continue
        spec = definition.input.get(name)
        ref = value[REF_KEY]
        if spec is None or not spec.secret:
            problems.append(Problem(f"input.{name}", "secret_ref_not_secret",
                                    "a $secret_ref is accepted only in a field marked secret"))
        elif not isinstance(ref, str) or not _REF_SHAPE.match(ref):
            problems.append(Problem(f"input.{name}", "secret_ref_malformed",
                                    "not a ref put_secret returned (sr_ and 43 characters)"))
        else:
            refs[name] = ref
    if problems:
        raise SecretRefRejected(problems)
    return refs


def ref_problem(field: str, reason: str) -> Problem:
    """Why the ref in ``field`` cannot be redeemed: ``unknown`` (or another tenant's: the
    two are never told apart), ``expired`` or ``used``."""
    messages = {
        "unknown": "this ref is unknown to the tenant (never issued here, or purged)",
        "expired": "this ref has expired",
        "used": "this ref was already used by another start (a ref is single-use)",
    }
    return Problem(f"input.{field}", f"secret_ref_{reason}", messages[reason])


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
