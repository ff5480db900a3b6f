"""Fault injection at every provider boundary, configured as rows in ``sandbox_control``.

Rules live in PostgreSQL so a test process can arm faults inside worker subprocesses.
A rule matches ``(provider, operation)`` (``'*'`` for any), optionally one saga or a key
prefix, and fires at one :class:`Boundary`:

* count-based rules (``count=N``) fire N times in total, shared by every process: the
  decrement is one atomic ``UPDATE ... WHERE remaining > 0 RETURNING``;
* probability rules fire when ``sha256(seed, provider, operation, boundary, key, draw)``
  falls below ``p``, where ``draw`` counts how often the rule was evaluated for that key
  (kept in the database), so a run is reproducible for a seed and a retry gets a fresh
  draw instead of meeting the same fault forever;
* a rule with neither fires every time it matches.

Each firing is committed on its own, before the provider's effect transaction, so a fault
that aborts the request still consumes its count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from sagafleet.sandbox._db import ConnectionSource, connect

__all__ = ["ArmedFaults", "Boundary", "FaultHit", "FaultInjector", "FaultRule"]


class Boundary(StrEnum):
    """Where in a provider call a fault strikes."""

    FAIL_BEFORE_COMMIT = "fail_before_commit"  # nothing committed; HTTP 503 (or params.status)
    TIMEOUT_BEFORE_DISPATCH = "timeout_before_dispatch"  # nothing committed; caller times out
    COMMIT_THEN_TIMEOUT = "commit_then_timeout"  # effect committed; response lost
    SLOW_VISIBILITY = "slow_visibility"  # committed; lookup sees it after params.delay_s
    BUSINESS_REJECTION = "business_rejection"  # sold out / no availability / declined
    COMPENSATION_FAILURE = "compensation_failure"  # release/refund/correction fails
    TARGET_CHANGED = "target_changed"  # someone else bumps the target's version first
    LOOKUP_UNAVAILABLE = "lookup_unavailable"  # lookup cannot answer


@dataclass(frozen=True)
class FaultRule:
    """One configured fault rule as stored in ``sandbox_control.fault_rules``."""

    rule_id: int
    provider: str
    operation: str
    boundary: str
    saga_id: str | None
    key_prefix: str | None
    remaining: int | None
    probability: float | None
    seed: str
    params: dict[str, Any]
    fired: int


@dataclass(frozen=True)
class FaultHit:
    """A fault that fired: which rule, where, and its parameters."""

    rule_id: int
    boundary: Boundary
    params: Mapping[str, Any] = field(default_factory=dict)


def draw(seed: str, *, provider: str, operation: str, boundary: str, key: str, n: int) -> float:
    """A deterministic number in [0, 1) for the n-th evaluation of a rule on a key."""
    material = "|".join((seed, provider, operation, boundary, key, str(n))).encode()
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big") / 2**64


_MATCHING_RULES = """
SELECT rule_id, provider, operation, boundary, saga_id, key_prefix, remaining, probability,
       seed, params, fired
  FROM sandbox_control.fault_rules
 WHERE provider IN (%(provider)s, '*')
   AND operation IN (%(operation)s, '*')
   AND (saga_id IS NULL OR saga_id = %(saga_id)s)
   AND (key_prefix IS NULL OR starts_with(%(key)s, key_prefix))
   AND (remaining IS NULL OR remaining > 0)
 ORDER BY rule_id
"""


class ArmedFaults:
    """The rules that match one provider call, evaluated boundary by boundary."""

    def __init__(
        self, provider: str, operation: str, saga_id: str | None, key: str, rules: list[FaultRule]
    ) -> None:
        self.provider = provider
        self.operation = operation
        self.saga_id = saga_id
        self.key = key
        self._rules = rules

    def fire(self, conn: psycopg.Connection[Any], boundary: Boundary) -> FaultHit | None:
        """Whether a rule fires at ``boundary`` for this call; committed on its own."""
        for rule in self._rules:
            if rule.boundary != boundary:
                continue
            with conn.transaction():
                if self._fires(conn, rule):
                    conn.execute(
                        "INSERT INTO sandbox_control.fault_hits"
                        " (rule_id, provider, operation, boundary, saga_id, op_key)"
                        " VALUES (%s, %s, %s, %s, %s, %s)",
                        (
                            rule.rule_id,
                            self.provider,
                            self.operation,
                            boundary.value,
                            self.saga_id,
                            self.key,
                        ),
                    )
                    return FaultHit(rule.rule_id, boundary, dict(rule.params))
        return None

    def _fires(self, conn: psycopg.Connection[Any], rule: FaultRule) -> bool:
        if rule.probability is not None:
            row = conn.execute(
                "INSERT INTO sandbox_control.fault_draws (rule_id, op_key, draws)"
                " VALUES (%s, %s, 1)"
                " ON CONFLICT (rule_id, op_key)"
                " DO UPDATE SET draws = fault_draws.draws + 1"
                " RETURNING draws",
                (rule.rule_id, self.key),
            ).fetchone()
            assert row is not None
            value = draw(
                rule.seed,
                provider=self.provider,
                operation=self.operation,
                boundary=rule.boundary,
                key=self.key,
                n=row[0],
            )
            if value >= rule.probability:
                return False
        # The count is re-checked under the row lock, so N firings happen at most N times
        # across every worker process, however many race for the last one.
        fired = conn.execute(
            "UPDATE sandbox_control.fault_rules"
            "   SET fired = fired + 1,"
            "       remaining = CASE WHEN remaining IS NULL THEN NULL ELSE remaining - 1 END"
            " WHERE rule_id = %s AND (remaining IS NULL OR remaining > 0)"
            " RETURNING rule_id",
            (rule.rule_id,),
        ).fetchone()
        return fired is not None


# Boundaries of a random mix and their share of the fault rate, per kind of operation.
_FORWARD_MIX: dict[Boundary, float] = {
    Boundary.FAIL_BEFORE_COMMIT: 3.0,
    Boundary.TIMEOUT_BEFORE_DISPATCH: 1.0,
    Boundary.COMMIT_THEN_TIMEOUT: 2.0,
    Boundary.SLOW_VISIBILITY: 1.0,
    Boundary.LOOKUP_UNAVAILABLE: 1.0,
    Boundary.BUSINESS_REJECTION: 1.0,
}
_COMPENSATION_MIX: dict[Boundary, float] = {
    Boundary.FAIL_BEFORE_COMMIT: 2.0,
    Boundary.COMMIT_THEN_TIMEOUT: 2.0,
    Boundary.COMPENSATION_FAILURE: 2.0,
    Boundary.LOOKUP_UNAVAILABLE: 1.0,
    Boundary.TARGET_CHANGED: 0.5,
}
# (provider, operation, is_compensation) for the trip providers.
TRIP_OPERATIONS: tuple[tuple[str, str, bool], ...] = (
    ("flights", "hold", False),
    ("flights", "release", True),
    ("hotels", "hold", False),
    ("hotels", "release", True),
    ("payments", "capture", False),
    ("payments", "refund", True),
    ("email", "send_itinerary", False),
    ("email", "send_correction", True),
)
# Faults that end a saga without a retry path (compensation or a human); a demo may omit them.
TERMINAL_BOUNDARIES = frozenset({Boundary.BUSINESS_REJECTION, Boundary.TARGET_CHANGED})


class FaultInjector:
    """Configure and evaluate fault rules stored in ``sandbox_control``."""

    def __init__(self, db: ConnectionSource) -> None:
        self._db = db

    def add(
        self,
        provider: str,
        operation: str,
        boundary: Boundary | str,
        *,
        saga_id: str | None = None,
        key_prefix: str | None = None,
        count: int | None = None,
        probability: float | None = None,
        seed: str = "",
        params: Mapping[str, Any] | None = None,
    ) -> int:
        """Add a rule and return its id; with neither ``count`` nor ``probability`` it always
        fires. ``provider``/``operation`` may be ``'*'``; ``saga_id``/``key_prefix`` narrow it.
        """
        boundary = Boundary(boundary)
        if count is not None and count < 0:
            raise ValueError("count must be >= 0")
        if probability is not None and not 0.0 <= probability <= 1.0:
            raise ValueError("probability must be within [0, 1]")
        with connect(self._db) as conn, conn.transaction():
            row = conn.execute(
                "INSERT INTO sandbox_control.fault_rules"
                " (provider, operation, boundary, saga_id, key_prefix, remaining,"
                "  probability, seed, params)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING rule_id",
                (
                    provider,
                    operation,
                    boundary.value,
                    saga_id,
                    key_prefix,
                    count,
                    probability,
                    seed,
                    Jsonb(dict(params or {})),
                ),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def clear(self) -> None:
        """Remove every rule (and their draw counters); the hit log is kept as evidence."""
        with connect(self._db) as conn, conn.transaction():
            conn.execute("DELETE FROM sandbox_control.fault_rules")

    def rules(self) -> list[FaultRule]:
        """Every configured rule, oldest first."""
        with connect(self._db) as conn, conn.transaction():
            cur = conn.cursor(row_factory=class_row(FaultRule))
            return cur.execute(
                "SELECT rule_id, provider, operation, boundary, saga_id, key_prefix, remaining,"
                " probability, seed, params, fired FROM sandbox_control.fault_rules"
                " ORDER BY rule_id"
            ).fetchall()

    def last_hit(self) -> int:
        """The newest hit's id (0: none yet): a mark to count a run's own hits from, since
        the hit log outlives every run on one database."""
        with connect(self._db) as conn, conn.transaction():
            row = conn.execute(
                "SELECT coalesce(max(hit_id), 0) FROM sandbox_control.fault_hits").fetchone()
        return int(row[0]) if row else 0

    def hit_counts(self, *, after: int = 0) -> dict[str, int]:
        """How many faults fired per boundary (for summaries and test evidence): those after
        the mark ``after`` (:meth:`last_hit`; 0: every one ever logged)."""
        with connect(self._db) as conn, conn.transaction():
            rows = conn.execute(
                "SELECT boundary, count(*) FROM sandbox_control.fault_hits WHERE hit_id > %s"
                " GROUP BY boundary", (after,)
            ).fetchall()
        return {str(boundary): int(n) for boundary, n in rows}

    def configure_mix(
        self,
        rate: float,
        seed: int | str,
        *,
        operations: Sequence[tuple[str, str, bool]] = TRIP_OPERATIONS,
        include_terminal: bool = True,
        visibility_delay_s: float = 1.0,
    ) -> list[int]:
        """Arm a reproducible random mix: each call meets some fault with probability ~``rate``.

        The rate is split over the boundaries that make sense for forward operations and for
        compensations; ``include_terminal=False`` leaves out business rejections and changed
        targets (faults no retry can cure).
        """
        if not 0.0 <= rate <= 1.0:
            raise ValueError("rate must be within [0, 1]")
        ids: list[int] = []
        for provider, operation, is_compensation in operations:
            mix = _COMPENSATION_MIX if is_compensation else _FORWARD_MIX
            if not include_terminal:
                mix = {b: w for b, w in mix.items() if b not in TERMINAL_BOUNDARIES}
            total = sum(mix.values())
            for boundary, weight in mix.items():
                params: dict[str, Any] = {}
                if boundary is Boundary.SLOW_VISIBILITY:
                    params = {"delay_s": visibility_delay_s}
                ids.append(
                    self.add(
                        provider,
                        operation,
                        boundary,
                        probability=rate * weight / total,
                        seed=f"{seed}:{provider}.{operation}:{boundary.value}",
                        params=params,
                    )
                )
        return ids

    def arm(
        self,
        conn: psycopg.Connection[Any],
        provider: str,
        operation: str,
        saga_id: str | None,
        key: str,
    ) -> ArmedFaults:
        """Load the rules matching one call (one query; nothing fires yet)."""
        # A single statement: on an autocommit connection it needs no explicit transaction.
        cur = conn.cursor(row_factory=class_row(FaultRule))
        rules = cur.execute(
            _MATCHING_RULES,
            {"provider": provider, "operation": operation, "saga_id": saga_id, "key": key},
        ).fetchall()
        return ArmedFaults(provider, operation, saga_id, key, rules)
