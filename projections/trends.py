"""Saga metrics per time bucket over a window: what the console's health charts draw.

The same measures as :mod:`projections.metrics` (throughput, compensation rate,
manual-intervention rate, time to terminal, retry amplification), for one tenant, one value
per bucket of a :class:`TrendWindow`, read from the active read model in one consistent
snapshot:

* **by finish time** (sagas that reached a terminal state in the bucket): throughput,
  compensation rate (``COMPENSATED`` over finished, as ``sagafleet stats``), partial
  compensations, time to terminal (p50 and p95 of ``finished_at - started_at``);
* **by start time** (sagas started in the bucket): manual-intervention rate (sagas that
  were escalated at least once, over started), and retry amplification of their
  operations ((attempts + the sweeper's redeliveries) / operations started).

Why the queries stay cheap: each one is an index range scan of the window for one tenant,
never a scan of the table. Finished sagas come from the ``(tenant, finished_at)`` index
(projections migration 0005), started ones from ``(tenant, started_at)`` (0002), and their
operations and redeliveries are looked up per saga of the window (``LATERAL``, by
``step_runs``' primary key and ``redeliveries_saga_idx``, which lead with the saga id). A
chart costs what its window holds, whatever the table size (``scripts/bench_health.py``);
buckets come from ``floor((t - start) / bucket)`` so one ``GROUP BY`` per query serves every
bucket. Projection lag has no history in the read model; the console samples it
(:mod:`sagafleet.console.health_history`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final

import psycopg
from psycopg import sql

from events.definition_store.port import check_tenant
from projections.context import ProjectionContext
from projections.metrics import TERMINAL
from projections.tables import active_version, table
from saga_core.errors import ErrorKind, SagaError

WINDOWS: Final[Mapping[str, tuple[int, int]]] = MappingProxyType({
    "1h": (300, 12),
    "6h": (900, 24),
    "24h": (3600, 24),
    "7d": (6 * 3600, 28),
})
"""The windows a chart may show: name -> (bucket seconds, number of buckets)."""

DEFAULT_WINDOW: Final = "1h"


class UnknownWindow(SagaError):
    """A window name that is not one of :data:`WINDOWS`."""

    kind = ErrorKind.INVALID_INPUT


@dataclass(frozen=True)
class TrendWindow:
    """``buckets`` buckets of ``bucket_s`` seconds ending at ``end`` (a bucket boundary)."""

    name: str
    end: datetime
    bucket_s: int
    buckets: int

    @classmethod
    def ending(cls, name: str, now: datetime) -> TrendWindow:
        """The window ``name`` whose last bucket holds ``now`` (buckets aligned to the epoch,
        so two pages opened a minute apart draw the same buckets)."""
        if name not in WINDOWS:
            raise UnknownWindow(f"no chart window {name!r}; known: {', '.join(WINDOWS)}")
        bucket_s, buckets = WINDOWS[name]
        epoch = int(now.timestamp())
        end = datetime.fromtimestamp((epoch // bucket_s + 1) * bucket_s, UTC)
        return cls(name, end, bucket_s, buckets)

    @property
    def start(self) -> datetime:
        """The start of the first bucket."""
        return self.end - timedelta(seconds=self.bucket_s * self.buckets)

    def bucket_start(self, index: int) -> datetime:
        """When bucket ``index`` (0 = the oldest) starts."""
        return self.start + timedelta(seconds=self.bucket_s * index)


def rate(part: float, whole: float) -> float | None:
    """``part / whole``, or None when nothing could happen (no bar, rather than a zero)."""
    return part / whole if whole else None


@dataclass(frozen=True)
class TrendBucket:
    """The counts of one bucket; the rates are derived from them."""

    start: datetime
    bucket_s: int
    started: int = 0
    escalated: int = 0
    finished: int = 0
    compensated: int = 0
    partially_compensated: int = 0
    time_to_terminal_p50_s: float | None = None
    time_to_terminal_p95_s: float | None = None
    operations_started: int = 0
    attempts: int = 0
    redeliveries: int = 0

    @property
    def throughput_per_min(self) -> float:
        """Sagas that reached a terminal state, per minute of the bucket."""
        return self.finished * 60.0 / self.bucket_s

    @property
    def compensation_rate(self) -> float | None:
        """Compensated over finished (None: nothing finished)."""
        return rate(self.compensated, self.finished)

    @property
    def manual_intervention_rate(self) -> float | None:
        """Sagas escalated to a person at least once, over sagas started."""
        return rate(self.escalated, self.started)

    @property
    def retry_amplification(self) -> float | None:
        """(Attempts + redeliveries) over operations started: 1.0 means no retry at all."""
        return rate(self.attempts + self.redeliveries, self.operations_started)


@dataclass(frozen=True)
class Trends:
    """One tenant's buckets over a window, oldest first, as of the database's ``now``."""

    tenant: str
    window: TrendWindow
    buckets: list[TrendBucket]
    as_of: datetime


_BUCKET = "floor(extract(epoch FROM ({column} - %(start)s)) / %(bucket_s)s)::int"

_FINISHED = """
SELECT {bucket},
       count(*),
       count(*) FILTER (WHERE s.state = 'COMPENSATED'),
       count(*) FILTER (WHERE s.state = 'PARTIALLY_COMPENSATED'),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at
           - s.started_at)),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at
           - s.started_at))
  FROM {summary} s
 WHERE s.tenant = %(tenant)s AND s.finished_at >= %(start)s AND s.finished_at < %(end)s
   AND s.state = ANY(%(terminal)s)
 GROUP BY 1
"""

_STARTED = """
SELECT {bucket}, count(*), count(*) FILTER (WHERE s.escalations > 0)
  FROM {summary} s
 WHERE s.tenant = %(tenant)s AND s.started_at >= %(start)s AND s.started_at < %(end)s
 GROUP BY 1
"""

# Operations and redeliveries are looked up per saga of the window (LATERAL: the primary key
# of step_runs and redeliveries_saga_idx lead with saga_id), so their cost follows the window,
# never the size of those tables (a hash join would read all of step_runs).
_OPERATIONS = """
SELECT {bucket}, COALESCE(sum(o.started), 0), COALESCE(sum(o.attempts), 0)
  FROM {summary} s
  CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE r.starts > 0) AS started,
                             COALESCE(sum(r.starts), 0) AS attempts
                        FROM {steps} r WHERE r.saga_id = s.saga_id) o
 WHERE s.tenant = %(tenant)s AND s.started_at >= %(start)s AND s.started_at < %(end)s
 GROUP BY 1
"""

_REDELIVERIES = """
SELECT {bucket}, COALESCE(sum(d.redeliveries), 0)
  FROM {summary} s
  CROSS JOIN LATERAL (SELECT count(*) AS redeliveries
                        FROM fleet.redeliveries d WHERE d.saga_id = s.saga_id) d
 WHERE s.tenant = %(tenant)s AND s.started_at >= %(start)s AND s.started_at < %(end)s
 GROUP BY 1
"""


def collect_trends(ctx: ProjectionContext, *, tenant: str, window: str = DEFAULT_WINDOW,
                   now: datetime | None = None, name: str = "sagas") -> Trends:
    """``tenant``'s buckets over the window named ``window`` ending at ``now`` (default: the
    database's clock), never another tenant's sagas."""
    check_tenant(tenant)
    if window not in WINDOWS:
        raise UnknownWindow(f"no chart window {window!r}; known: {', '.join(WINDOWS)}")
    with ctx.connection() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        clock = conn.execute("SELECT now()").fetchone()
        as_of: datetime = now or (clock[0] if clock else datetime.now(UTC))
        span = TrendWindow.ending(window, as_of)
        version = active_version(conn, name)
        params = {"tenant": tenant, "start": span.start, "end": span.end,
                  "bucket_s": span.bucket_s, "terminal": list(TERMINAL)}
        finished = _by_bucket(conn, _FINISHED, "s.finished_at", version, params)
        started = _by_bucket(conn, _STARTED, "s.started_at", version, params)
        operations = _by_bucket(conn, _OPERATIONS, "s.started_at", version, params)
        redeliveries: dict[int, tuple[Any, ...]] = {}
        exists = conn.execute("SELECT to_regclass('fleet.redeliveries') IS NOT NULL").fetchone()
        if exists and exists[0]:
            redeliveries = _by_bucket(conn, _REDELIVERIES, "s.started_at", version, params)
    buckets = []
    for index in range(span.buckets):
        done = finished.get(index, (0, 0, 0, None, None))
        began = started.get(index, (0, 0))
        ops = operations.get(index, (0, 0))
        buckets.append(TrendBucket(
            start=span.bucket_start(index), bucket_s=span.bucket_s,
            started=int(began[0]), escalated=int(began[1]),
            finished=int(done[0]), compensated=int(done[1]),
            partially_compensated=int(done[2]),
            time_to_terminal_p50_s=_seconds(done[3]), time_to_terminal_p95_s=_seconds(done[4]),
            operations_started=int(ops[0]), attempts=int(ops[1]),
            redeliveries=int(redeliveries.get(index, (0,))[0]),
        ))
    return Trends(tenant, span, buckets, as_of)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def _by_bucket(conn: psycopg.Connection[Any], template: str, column: str, version: int,
               params: dict[str, Any]) -> dict[int, tuple[Any, ...]]:
    """The rows of one bucketed query, by bucket index (``column`` is a fixed name here)."""
    query = sql.SQL(template).format(
        bucket=sql.SQL(_BUCKET.format(column=column)),
        summary=table("saga_summary", version),
        steps=table("step_runs", version),
    )
    return {int(row[0]): tuple(row[1:]) for row in conn.execute(query, params)}
