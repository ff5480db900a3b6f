"""Sign-in throttling: failures slow later attempts per client address and per token prefix.

Every failed sign-in (a token that proves nobody) counts against two keys: the client's
address (an IPv6 address by its /64, which one machine usually holds whole) and the token's
first :data:`PREFIX_CHARS` characters. Within a window (:class:`ThrottlePolicy`), a key's
first ``free_failures`` cost nothing; past them each attempt of that address or prefix is
**slowed**: it waits (asleep on the event loop, holding no thread and no database
connection) half a second, then a second, two, four, ... up to ``max_delay``, and is then
checked like any other. A valid token still signs in after its wait.

Why slowed and not locked out: a lockout is what an attacker would use against someone
else. The token-prefix key cannot be aimed at a person (it takes knowing the first
characters of their token); the address key can, when they share an address (a NAT, a
proxy), and then costs the person at most ``max_delay`` per attempt. To keep an attacker from
outrunning the delay with parallel attempts, at most :data:`WAITING_PER_KEY` slowed attempts
of one key wait at once in a process; one more is refused (429, ``Retry-After``). Keeping an
address refused so takes holding that many connections open all the time, not one request
a minute.

Where the counts live: in the database (``fleet.signin_failures``, workers migration 0015),
not per process, so a console run as several replicas behind a load balancer counts one
attacker once, and a restart forgives nothing. The waits are per process (they are
connections this process holds). A success forgives its token prefix's failures (the
person's own typos), never its address's (an attacker's own valid token must not reset
what their address has spent).
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from events import EventStore
from events.eventstore.driver import translated_errors
from events.eventstore.model import Clock, utc_now

__all__ = ["PREFIX_CHARS", "WAITING_PER_KEY", "SignInFailures", "SignInThrottle",
           "ThrottleKeys", "ThrottlePolicy", "ThrottleVerdict", "throttle_keys"]

PREFIX_CHARS: Final = 12
"""A token's characters that key its failures: ``sft_`` and 8 random ones (48 bits, of the
256 a token holds)."""
WAITING_PER_KEY: Final = 4
"""Slowed sign-ins of one address or prefix that may wait at once in one process."""
FIRST_DELAY_S: Final = 0.5
"""The wait of the first slowed attempt; each later one waits twice the one before."""


@dataclass(frozen=True)
class ThrottlePolicy:
    """How many failures a key has for free in a window, and the longest wait past them."""

    free_failures: int = 10
    window: timedelta = timedelta(minutes=15)
    max_delay_s: float = 10.0

    def __post_init__(self) -> None:
        if self.free_failures < 0 or self.window <= timedelta(0) or self.max_delay_s < 0:
            raise ValueError("a sign-in throttle needs free failures >= 0, a positive window "
                             "and a maximum delay >= 0")

    def delay_s(self, failures: int) -> float:
        """How long the next attempt of a key with ``failures`` in the window waits: nothing
        while it has fewer than ``free_failures``, then 0.5 s, doubling with each failure
        more, at most ``max_delay_s``."""
        if failures < self.free_failures:
            return 0.0
        beyond = failures - self.free_failures
        # The exponent is bounded: a float power of two overflows past 2 ** 1023.
        return min(self.max_delay_s, FIRST_DELAY_S * 2.0 ** min(beyond, 64))


@dataclass(frozen=True)
class ThrottleKeys:
    """The keys one attempt counts against (digests: what the table keeps)."""

    address: str
    token: str

    def __iter__(self) -> Iterator[str]:
        return iter((self.address, self.token))


def throttle_keys(address: str | None, token: str) -> ThrottleKeys:
    """The keys of an attempt from ``address`` (None: not heard over a network) with
    ``token``."""
    return ThrottleKeys(_digest(f"address:{_network(address)}"),
                        _digest(f"token:{token.strip()[:PREFIX_CHARS]}"))


def _network(address: str | None) -> str:
    """The address as throttled: an IPv4 address itself, an IPv6 address by its /64."""
    if address is None:
        return "unknown"
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:  # a name (a Unix socket path, a test client): taken as it is
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{parsed}/64", strict=False))
    return str(parsed)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ThrottleVerdict:
    """What to do with an attempt: wait ``delay_s`` first (0: none), or refuse it."""

    failures: int
    """The most failures either key has in its window."""
    delay_s: float
    refused: bool

    @property
    def retry_after_s(self) -> int:
        """The ``Retry-After`` of a refusal: whole seconds, at least one."""
        return max(1, math.ceil(self.delay_s))


class SignInFailures:
    """The failure counts of ``fleet.signin_failures``, shared by every console process."""

    def __init__(self, store: EventStore, policy: ThrottlePolicy,
                 clock: Clock = utc_now) -> None:
        self._store = store
        self.policy = policy
        self._clock = clock

    def counted(self, keys: ThrottleKeys) -> int:
        """The most failures either key has in its current window."""
        since = self._clock() - self.policy.window
        with translated_errors(), self._store.connection() as conn:
            row = conn.execute(
                "SELECT coalesce(max(failures), 0) FROM fleet.signin_failures"
                " WHERE key_digest = ANY(%s) AND window_started_at > %s",
                (list(keys), since)).fetchone()
        return int(row[0]) if row else 0

    def record(self, keys: ThrottleKeys) -> None:
        """One more failure for each key (a window that has passed starts afresh); rows of
        passed windows are deleted meanwhile."""
        now = self._clock()
        since = now - self.policy.window
        with translated_errors(), self._store.connection() as conn:
            for key in keys:
                conn.execute(
                    "INSERT INTO fleet.signin_failures AS f (key_digest, failures,"
                    " window_started_at, last_failed_at) VALUES (%(key)s, 1, %(now)s, %(now)s)"
                    " ON CONFLICT (key_digest) DO UPDATE SET"
                    " failures = CASE WHEN f.window_started_at <= %(since)s THEN 1"
                    "   ELSE f.failures + 1 END,"
                    " window_started_at = CASE WHEN f.window_started_at <= %(since)s"
                    "   THEN %(now)s ELSE f.window_started_at END,"
                    " last_failed_at = %(now)s",
                    {"key": key, "now": now, "since": since})
            conn.execute("DELETE FROM fleet.signin_failures WHERE window_started_at <= %s",
                         (since,))

    def forgive(self, keys: ThrottleKeys) -> None:
        """After a success: forget the token prefix's failures (not the address's)."""
        with translated_errors(), self._store.connection() as conn:
            conn.execute("DELETE FROM fleet.signin_failures WHERE key_digest = %s",
                         (keys.token,))


class SignInThrottle:
    """The throttle of one console process: shared counts, and the waits it holds now."""

    def __init__(self, failures: SignInFailures) -> None:
        self.failures = failures
        self._waiting: Counter[str] = Counter()

    @property
    def policy(self) -> ThrottlePolicy:
        """The policy the counts are judged by."""
        return self.failures.policy

    def judge(self, keys: ThrottleKeys, failures: int) -> ThrottleVerdict:
        """The verdict on an attempt whose keys have ``failures`` (asked on the event loop,
        which owns the count of waits)."""
        delay = self.policy.delay_s(failures)
        crowded = delay > 0 and any(self._waiting[key] >= WAITING_PER_KEY for key in keys)
        return ThrottleVerdict(failures, delay, refused=crowded)

    def waiting(self, keys: ThrottleKeys) -> int:
        """How many slowed attempts of either key wait now (the most of the two)."""
        return max(self._waiting[key] for key in keys)

    @contextmanager
    def held(self, keys: ThrottleKeys) -> Iterator[None]:
        """Count an attempt as waiting while the block runs (on the event loop)."""
        self._waiting.update(keys)
        try:
            yield
        finally:
            self._waiting.subtract(keys)
            self._waiting += Counter()  # drops the keys that reached zero
