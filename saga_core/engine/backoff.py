"""Exponential backoff with full jitter, drawn deterministically from the operation key.

The jitter fraction is a pure function of (operation key, attempt), so every process that folds
the same log computes the same ``not_before`` -- no random state, no clock.
"""

from __future__ import annotations

from datetime import timedelta

from saga_core.definitions.definition import RetryPolicy
from saga_core.keys import sha256_hex

# Beyond this exponent the cap always wins; stopping here avoids float overflow.
_MAX_EXPONENT = 62


def jitter_fraction(operation_key: str, attempt: int) -> float:
    """A uniform fraction in [0, 1) derived from sha256(key, attempt)."""
    digest = sha256_hex(f"{operation_key}:{attempt}")
    return int(digest[:13], 16) / float(16**13)


def backoff_delay(policy: RetryPolicy, operation_key: str, attempt: int) -> timedelta:
    """Full-jitter delay after ``attempt``: uniform below min(max_delay, base * 2**(attempt-1))."""
    exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
    ceiling = policy.base_delay_s * (2**exponent)
    if policy.max_delay_s is not None:
        ceiling = min(ceiling, policy.max_delay_s)
    return timedelta(seconds=ceiling * jitter_fraction(operation_key, attempt))
