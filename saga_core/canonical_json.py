"""Canonical JSON: the one serialisation every process agrees on, for hashes and keys.

It sits below everything else in ``saga_core`` (it imports nothing of it), so that limits,
keys and hashes can all measure and hash with it.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import BaseModel

_SCALARS: Final = frozenset({str, int, float, bool, type(None)})

# Built once: json.dumps(**options) constructs an encoder on every call.
_CANONICAL: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def to_jsonable(obj: Any) -> Any:
    """Turn pydantic models (also nested in dicts/lists) into plain JSON values."""
    kind = type(obj)
    # Exact-type checks first: isinstance against BaseModel (an ABC) is slow, and folds
    # and hashes run this on every event.
    if kind in _SCALARS:
        return obj
    if kind is dict:
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if kind is list or kind is tuple:
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


def canonical_json(obj: Any) -> str:
    """Serialize ``obj`` the one way every process agrees on (NaN is refused, not guessed)."""
    return _CANONICAL.encode(to_jsonable(obj))
