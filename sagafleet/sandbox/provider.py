"""The machinery every sandbox provider shares: Stripe-like idempotency keys and faults.

A call runs the same way for every provider and operation::

    latency → [timeout_before_dispatch] → [fail_before_commit]
            → (new key only) [business_rejection | compensation_failure | target_changed]
            → one transaction: claim the key, or replay / reject a reused key;
                               apply the effect; store the response (+ [slow_visibility])
            → [commit_then_timeout]

The key row is written in the same transaction as the effect, so "the key is stored" and
"the effect happened" are the same fact. A concurrent request with the same key waits on
the key's unique index and then replays the stored response.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from sagafleet.sandbox._db import ConnectionSource, connect
from sagafleet.sandbox.errors import ProviderError, ProviderTimeout, invalid_request
from sagafleet.sandbox.faults import ArmedFaults, Boundary, FaultHit, FaultInjector

__all__ = ["ProviderResponse", "SandboxProvider", "StoredRequest", "request_hash"]


@dataclass(frozen=True)
class ProviderResponse:
    """What the provider answers for a committed effect (its stored idempotent result)."""

    resource_id: str
    version: int
    status: str
    fields: dict[str, Any] = field(default_factory=dict)
    replayed: bool = False

    def to_json(self) -> dict[str, Any]:
        """The stored form, without the per-call ``replayed`` flag."""
        return {
            "resource_id": self.resource_id,
            "version": self.version,
            "status": self.status,
            "fields": self.fields,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, replayed: bool) -> ProviderResponse:
        """Rebuild a stored response."""
        return cls(
            resource_id=str(data["resource_id"]),
            version=int(data["version"]),
            status=str(data["status"]),
            fields=dict(data.get("fields") or {}),
            replayed=replayed,
        )


@dataclass(frozen=True)
class StoredRequest:
    """A committed request found by its idempotency key."""

    key: str
    operation: str
    saga_id: str | None
    response: ProviderResponse


def request_hash(operation: str, args: Mapping[str, Any]) -> str:
    """Canonical hash of a request: same key + different hash is a reused key."""
    canonical = json.dumps(
        {"operation": operation, "args": args}, sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class _Request:
    """One call as the provider handles it: what, with which arguments, under which key."""

    operation: str
    args: Mapping[str, Any]
    key: str
    saga_id: str
    digest: str  # request_hash(operation, args): a reused key must bring the same


Effect = Callable[[psycopg.Connection[Any], Mapping[str, Any], str], ProviderResponse]
TargetChange = Callable[[psycopg.Connection[Any], Mapping[str, Any]], None]


class SandboxProvider:
    """Base of the sandbox providers; subclasses register their operations' effects."""

    name: ClassVar[str]
    schema: ClassVar[str]
    business_rejection: ClassVar[tuple[int, str]]  # (status, code) of the injected rejection

    def __init__(
        self,
        db: ConnectionSource,
        *,
        faults: FaultInjector | None = None,
        latency_s: float = 0.0,
    ) -> None:
        self._db = db
        self.faults = faults if faults is not None else FaultInjector(db)
        self.latency_s = latency_s
        self._effects: dict[str, Effect] = {}
        self._compensations: dict[str, TargetChange | None] = {}
        self._non_deduping: set[str] = set()

    # -- registration (subclasses call these in __init__)

    def _forward(self, operation: str, effect: Effect) -> None:
        self._effects[operation] = effect

    def _compensation(
        self, operation: str, effect: Effect, change_target: TargetChange | None
    ) -> None:
        self._effects[operation] = effect
        self._compensations[operation] = change_target

    def stop_deduping(self, operation: str) -> None:
        """Make ``operation`` behave like an API without idempotency keys (SMTP, say).

        A repeated key then makes a new effect; the first request stays findable by lookup.
        This lets tests exercise a tool that cannot dedupe and must wait out its horizon.
        """
        if operation not in self._effects:
            raise ValueError(f"{self.name} has no operation {operation!r}")
        self._non_deduping.add(operation)

    def dedupes(self, operation: str) -> bool:
        """Whether a repeated key replays the stored result for ``operation``."""
        return operation not in self._non_deduping

    @property
    def operations(self) -> list[str]:
        """The operations this provider offers."""
        return sorted(self._effects)

    def _table(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    # -- the API

    def perform(self, operation: str, args: Mapping[str, Any], key: str) -> ProviderResponse:
        """Run ``operation`` once per idempotency ``key``; raise ProviderError/ProviderTimeout."""
        if operation not in self._effects:
            raise invalid_request(f"{self.name} has no operation {operation!r}")
        if not key:
            raise invalid_request("an idempotency key is required")
        saga_id = args.get("saga_id")
        if not isinstance(saga_id, str) or not saga_id:
            raise invalid_request("saga_id is required", field="saga_id")
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        try:
            with connect(self._db) as conn:
                return self._perform(
                    conn, _Request(operation, args, key, saga_id, request_hash(operation, args))
                )
        except PoolTimeout as exc:
            raise ProviderError(503, "unavailable", f"{self.name} is overloaded") from exc
        except psycopg.OperationalError as exc:
            # The connection broke mid-request: the caller cannot know whether it committed.
            raise ProviderTimeout(self.name, operation, key) from exc
        except psycopg.Error as exc:
            raise ProviderError(500, "internal_error", f"{self.name}: {exc}") from exc

    def lookup(self, key: str, operation: str) -> StoredRequest | None:
        """The committed, visible request under ``key``, or None; 503 when unavailable."""
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        try:
            with connect(self._db) as conn:
                return self._lookup(conn, key, operation)
        except PoolTimeout as exc:
            raise ProviderError(503, "unavailable", f"{self.name} is overloaded") from exc
        except psycopg.Error as exc:
            raise ProviderError(503, "unavailable", f"{self.name}: {exc}") from exc

    # -- the shared flow

    def _perform(self, conn: psycopg.Connection[Any], request: _Request) -> ProviderResponse:
        """One call, boundary by boundary, as the module's diagram draws it."""
        operation, key = request.operation, request.key
        armed = self.faults.arm(conn, self.name, operation, request.saga_id, key)
        if armed.fire(conn, Boundary.TIMEOUT_BEFORE_DISPATCH):
            raise ProviderTimeout(self.name, operation, key)
        hit = armed.fire(conn, Boundary.FAIL_BEFORE_COMMIT)
        if hit:
            raise ProviderError(
                int(hit.params.get("status", 503)),
                str(hit.params.get("code", "unavailable")),
                f"{self.name} failed before commit (injected)",
            )
        delay_s = 0.0
        if not self.dedupes(operation) or not self._key_stored(conn, key):
            # Faults that shape a new effect; a replay returns the stored result untouched.
            self._fire_effect_faults(conn, armed, operation, request.args)
            slow = armed.fire(conn, Boundary.SLOW_VISIBILITY)
            delay_s = float(slow.params.get("delay_s", 2.0)) if slow else 0.0
        with conn.transaction():
            response = self._claim_and_apply(conn, request, delay_s=delay_s)
        if armed.fire(conn, Boundary.COMMIT_THEN_TIMEOUT):
            raise ProviderTimeout(self.name, operation, key)
        return response

    def _key_stored(self, conn: psycopg.Connection[Any], key: str) -> bool:
        """Whether a request under ``key`` is already committed (then this call replays it)."""
        row = conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE key = %s").format(self._table("idempotency_keys")),
            (key,),
        ).fetchone()
        return row is not None

    def _fire_effect_faults(
        self,
        conn: psycopg.Connection[Any],
        armed: ArmedFaults,
        operation: str,
        args: Mapping[str, Any],
    ) -> None:
        if operation not in self._compensations:
            hit = armed.fire(conn, Boundary.BUSINESS_REJECTION)
            if hit:
                self._raise_rejection(hit)
            return
        hit = armed.fire(conn, Boundary.COMPENSATION_FAILURE)
        if hit:
            if hit.params.get("error_class", "transient") == "permanent":
                raise ProviderError(
                    409, "compensation_rejected", f"{self.name}.{operation} was refused (injected)"
                )
            raise ProviderError(
                503, "unavailable", f"{self.name}.{operation} is unavailable (injected)"
            )
        change_target = self._compensations[operation]
        if change_target is not None and armed.fire(conn, Boundary.TARGET_CHANGED):
            # "Someone else" edits the target and commits before our request is handled.
            with conn.transaction():
                change_target(conn, args)

    def _raise_rejection(self, hit: FaultHit) -> None:
        status, code = self.business_rejection
        raise ProviderError(
            int(hit.params.get("status", status)),
            str(hit.params.get("code", code)),
            f"{self.name} rejected the request: {hit.params.get('code', code)} (injected)",
        )

    def _claim_and_apply(
        self, conn: psycopg.Connection[Any], request: _Request, *, delay_s: float
    ) -> ProviderResponse:
        """In one transaction: claim the key, then the effect and its stored response, or the
        replay of the stored one (or, without dedupe, the effect again).

        Claiming the key first serialises concurrent requests with the same key: the second
        waits on the unique index, then finds the committed row and replays it.
        """
        operation, key = request.operation, request.key
        claimed = conn.execute(
            sql.SQL(
                "INSERT INTO {} (key, operation, request_hash, saga_id, visible_at)"
                " VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))"
                " ON CONFLICT (key) DO NOTHING RETURNING key"
            ).format(self._table("idempotency_keys")),
            (key, operation, request.digest, request.saga_id, delay_s),
        ).fetchone()
        if claimed is None:
            if self.dedupes(operation):
                return self._replay(conn, operation, key, request.digest)
            # No dedupe: the effect happens again; lookup keeps finding the first one.
            return self._effects[operation](conn, request.args, key)
        response = self._effects[operation](conn, request.args, key)
        conn.execute(
            sql.SQL("UPDATE {} SET response = %s WHERE key = %s").format(
                self._table("idempotency_keys")
            ),
            (Jsonb(response.to_json()), key),
        )
        return response

    def _replay(
        self, conn: psycopg.Connection[Any], operation: str, key: str, digest: str
    ) -> ProviderResponse:
        row = conn.execute(
            sql.SQL("SELECT operation, request_hash, response FROM {} WHERE key = %s").format(
                self._table("idempotency_keys")
            ),
            (key,),
        ).fetchone()
        assert row is not None  # the conflicting row is committed; keys are never deleted
        stored_operation, stored_hash, stored = row
        if stored_operation != operation or stored_hash != digest:
            raise ProviderError(
                422,
                "idempotency_key_reused",
                f"idempotency key {key!r} was already used for a different request"
                f" ({self.name}.{stored_operation})",
                {"key": key, "operation": stored_operation},
            )
        return ProviderResponse.from_json(stored, replayed=True)

    def _lookup(
        self, conn: psycopg.Connection[Any], key: str, operation: str
    ) -> StoredRequest | None:
        row = conn.execute(
            sql.SQL(
                "SELECT operation, saga_id, response, visible_at <= now()"
                " FROM {} WHERE key = %s"
            ).format(self._table("idempotency_keys")),
            (key,),
        ).fetchone()
        saga_id = None if row is None else row[1]
        armed = self.faults.arm(conn, self.name, operation, saga_id, key)
        if armed.fire(conn, Boundary.LOOKUP_UNAVAILABLE):
            raise ProviderError(503, "unavailable", f"{self.name} lookup is unavailable (injected)")
        if row is None or not row[3]:
            return None
        return StoredRequest(
            key=key,
            operation=str(row[0]),
            saga_id=saga_id,
            response=ProviderResponse.from_json(row[2], replayed=True),
        )


def require_str(args: Mapping[str, Any], name: str) -> str:
    """A non-empty string argument, or 400."""
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise invalid_request(f"{name} must be a non-empty string", field=name)
    return value


def require_int(args: Mapping[str, Any], name: str, *, minimum: int = 0) -> int:
    """An integral argument of at least ``minimum`` (``42.0`` passes, ``4.2`` does not), or 400."""
    value = args.get(name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise invalid_request(f"{name} must be an integer >= {minimum}", field=name)
    return value


def first_of(args: Mapping[str, Any], *names: str) -> str:
    """The first of ``names`` present in ``args`` (aliases accepted by an operation)."""
    return next((name for name in names if name in args), names[0])


def optional_version(args: Mapping[str, Any]) -> int | None:
    """The compensation's expected version, under either spelling; None when not given."""
    name = first_of(args, "expected_version", "expect_version")
    return None if args.get(name) is None else require_int(args, name, minimum=1)


def stable_number(text: str, modulo: int) -> int:
    """A number derived from ``text`` (prices, seats) so runs are reproducible."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") % modulo
