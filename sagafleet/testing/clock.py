"""A clock the test moves by hand, so leases, backoff and approval expiry run in no time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: Where every TestClock starts unless told otherwise: runs are reproducible to the second.
EPOCH = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


class TestClock:
    """Aware UTC time that stands still until :meth:`advance` moves it; call it for now."""

    __test__ = False  # not a pytest test class, whatever its name says

    def __init__(self, start: datetime = EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("a TestClock needs an aware datetime (UTC), not a naive one")
        self._now = start

    def now(self) -> datetime:
        """The current test time."""
        return self._now

    def __call__(self) -> datetime:
        # The fleet's roles take a clock as a zero-argument callable
        # (application.orchestrator.Clock).
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move time forward by ``seconds`` (never back) and return the new now."""
        if seconds < 0:
            raise ValueError(f"time only moves forward, not by {seconds} s")
        self._now += timedelta(seconds=seconds)
        return self._now
