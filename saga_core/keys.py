"""Canonical JSON, payload hashes, operation keys and approval action hashes.

Every identity in sagafleet is a sha256 over canonical JSON (sorted keys, compact separators,
``ensure_ascii=False``), so two processes that never met derive the same key from the same facts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NewType

from pydantic import BaseModel

from saga_core.contracts import StepKind
from saga_core.errors import KeyReuseError

OperationKey = NewType("OperationKey", str)


def to_jsonable(obj: Any) -> Any:
    """Turn pydantic models (also nested in dicts/lists) into plain JSON values."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


def canonical_json(obj: Any) -> str:
    """Serialize ``obj`` the one way every process agrees on (NaN is refused, not guessed)."""
    return json.dumps(
        to_jsonable(obj),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def sha256_hex(text: str) -> str:
    """Hex sha256 of a UTF-8 string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_hash(obj: Any) -> str:
    """The canonical payload hash stored next to an operation key."""
    return sha256_hex(canonical_json(obj))


def operation_key(
    saga_id: str, step_id: str, kind: StepKind, operation_version: int
) -> OperationKey:
    """The stable key of one logical effect: same across attempts, workers and replans."""
    # Deliberately no attempt number and no randomness: a retry must look like the same call.
    return OperationKey(payload_hash([saga_id, step_id, str(kind), operation_version]))


def action_hash(saga_id: str, step_id: str, kind: StepKind, args: dict[str, Any]) -> str:
    """What an approval is bound to: this saga, this step and kind, these resolved arguments."""
    return payload_hash({"saga_id": saga_id, "step_id": step_id, "kind": str(kind), "args": args})


def check_key_payload(recorded_hash: str | None, new_hash: str, key: str) -> None:
    """Raise :class:`KeyReuseError` when ``key`` was recorded with a different payload."""
    if recorded_hash is not None and recorded_hash != new_hash:
        raise KeyReuseError(key, recorded_hash, new_hash)
