"""What the read models keep no history of, sampled by the console: projection lag and alerts.

The saga metrics have their history in the read model (``projections.trends`` buckets the
sagas by when they started and finished). Projection lag and the business alerts are only
ever "now": nothing records what they were an hour ago. So the console records a sample
each time it computes them for a health page (the page, and each live refresh of it, which
comes whenever the read models move), per tenant, at most one per :attr:`min_interval`,
for at most :attr:`keep`. The chart says plainly that it covers what this console process
saw since it started; a deployment that wants a long lag history scrapes the Prometheus
exporter (``sagafleet projector --metrics-port``), which is the platform's record of it.

One object per console process, held by the health page's routes (no global).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

__all__ = ["HealthHistory", "HealthSample"]

MAX_SAMPLES: Final = 20_000
"""Per tenant: 7 days at one sample every 30 s, with room to spare."""


@dataclass(frozen=True)
class HealthSample:
    """Projection lag (seconds the oldest unapplied event has waited; None: unknown) and the
    number of business alerts firing, at one moment."""

    at: datetime
    lag_s: float | None
    alerts: int


class HealthHistory:
    """Samples per tenant, oldest first; thread-safe (pages run in worker threads)."""

    def __init__(self, *, keep: timedelta = timedelta(days=7),
                 min_interval: timedelta = timedelta(seconds=5),
                 max_samples: int = MAX_SAMPLES) -> None:
        self.keep = keep
        self.min_interval = min_interval
        self._max = max_samples
        self._samples: dict[str, deque[HealthSample]] = {}
        self._lock = threading.Lock()

    def record(self, tenant: str, sample: HealthSample) -> bool:
        """Keep ``sample`` for ``tenant`` unless one was kept less than ``min_interval``
        before it; True when kept. Samples older than ``keep`` are dropped."""
        with self._lock:
            samples = self._samples.setdefault(tenant, deque(maxlen=self._max))
            if samples and sample.at - samples[-1].at < self.min_interval:
                return False
            samples.append(sample)
            while samples and samples[0].at < sample.at - self.keep:
                samples.popleft()
            return True

    def since(self, tenant: str, start: datetime) -> list[HealthSample]:
        """``tenant``'s samples taken at or after ``start``, oldest first."""
        with self._lock:
            return [s for s in self._samples.get(tenant, ()) if s.at >= start]
