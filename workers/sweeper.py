"""The sweeper: finds in the log what is due and not in flight, and re-enqueues it.

Redis is lossy by design; this is what makes that harmless. What one saga needs is
:func:`sweep_saga` (no tables of its own, so the in-memory test kit sweeps with it too);
for each item of ``saga_core.due_work``:

* a schedule or lookup overdue by more than the expected queue wait → re-publish;
* an expired lease, an expired approval, or anything else decide wants → record it
  (one commit), and publish what that commit made due.

The :class:`Sweeper` adds the PostgreSQL bookkeeping: it keeps ``fleet.active_sagas`` (a
rebuildable projection of SagaStarted/SagaFinished, checkpointed in the same transaction),
reads the active sagas 500 to a query, and counts every re-enqueue in
``fleet.redeliveries`` (retry amplification). A saga it cannot sweep (a lost race, a
corrupt stream) is reported and the pass goes on with the next. Several copies may run:
an advisory lock lets one sweep at a time, the others stand by.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from events import SubscriptionBusy
from events.sagas import LoadedSaga, SagaNotFound, saga_id_of
from saga_core import due_work
from saga_core.claims import DueWork
from saga_core.errors import SagaError
from workers.messages import StepCommand
from workers.orchestrator import Committed, Orchestrator

if TYPE_CHECKING:  # the Sweeper's fleet; sweep_saga needs none (the test kit imports it)
    from workers.fleet import Fleet

log = logging.getLogger(__name__)

TRACKER = "fleet.active_sagas"
SWEEP_LOCK = 0x5A6A_0001
SWEEP_CHUNK = 500  # active sagas read per query


@dataclass
class SweepReport:
    """What one pass found and did."""

    tracked: int = 0
    active: int = 0
    republished: int = 0
    advanced: int = 0
    expired_refs: int = 0  # deposited secrets forgotten: expired, spent or not
    expired_nonces: int = 0  # signed commands' single-use ids past their window
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SagaSweep:
    """What sweeping one saga found due, and what it recorded for it."""

    due: tuple[DueWork, ...]
    republish: tuple[StepCommand, ...]  # overdue schedules and lookups, to enqueue again
    committed: Committed | None  # decide's answer to the rest (None: nothing needed it)

    @property
    def wake_ups(self) -> tuple[StepCommand, ...]:
        """Every command to publish, once the commit (if any) is done."""
        made_due = self.committed.wake_ups if self.committed is not None else ()
        return (*self.republish, *made_due)


def sweep_saga(orchestrator: Orchestrator, loaded: LoadedSaga, queue_wait: timedelta) -> SagaSweep:
    """Find what is due in one saga now and record what needs a decision; publish nothing.

    Raises SagaError (RaceLost among them) when the decision cannot be recorded.
    """
    due = due_work(loaded.state, orchestrator.clock(), queue_wait)
    republish = tuple(
        StepCommand(saga_id=loaded.saga_id, step_id=item.step_id, kind=item.kind,
                    attempt=item.attempt)
        for item in due
        if item.action in ("execute", "reconcile") and item.step_id and item.kind
    )
    needs_decision = len(republish) < len(due)
    committed = orchestrator.advance(loaded.saga_id, known=loaded) if needs_decision else None
    return SagaSweep(tuple(due), republish, committed)


class Sweeper:
    """Re-enqueues due work from the log; safe to run as several copies."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.queue_wait = timedelta(seconds=fleet.config.queue_wait_s)
        self._subscription = fleet.store.subscription(TRACKER)
        self.vault = fleet.secrets

    def track(self, limit: int = 1000) -> int:
        """Fold new SagaStarted/SagaFinished events into ``fleet.active_sagas``."""
        seen = 0
        while True:
            try:
                with self._subscription.next_batch(limit) as batch:
                    for event in batch.events:
                        saga_id = saga_id_of(event.stream_id)
                        if saga_id is None:
                            continue
                        if event.type == "SagaStarted":
                            batch.connection.execute(
                                "INSERT INTO fleet.active_sagas (saga_id, tenant, started_at)"
                                " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                                (saga_id, event.data.get("tenant", ""), event.recorded_at),
                            )
                        elif event.type == "SagaFinished":
                            batch.connection.execute(
                                "DELETE FROM fleet.active_sagas WHERE saga_id = %s", (saga_id,)
                            )
                            # Nothing runs after the end: its secret inputs are no longer needed.
                            self.vault.purge(saga_id, batch.connection)
                    count = len(batch.events)
            except SubscriptionBusy:
                return seen
            seen += count
            if count < limit:
                return seen

    def sweep(self) -> SweepReport:
        """One pass: track new sagas, then re-enqueue or record what is due."""
        report = SweepReport()
        with self.fleet.store.connection() as lock_conn:
            got = lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (SWEEP_LOCK,)).fetchone()
            if not got or not got[0]:
                return report  # another sweeper is at work
            try:
                report.tracked = self.track()
                # A deposited secret no start used in time is forgotten, as a finished
                # saga's secrets are (a spent ref's row only remembers who spent it).
                report.expired_refs = self.vault.purge_expired(self.fleet.clock())
                # A signed command's id is kept only while a copy could pass the window
                # check; after that the check alone refuses it (a bounded table).
                report.expired_nonces = self.fleet.command_nonces.purge_expired(
                    self.fleet.clock())
                active = self._active_ids()
                # Read in chunks (one query each), not one saga at a time: a pass over
                # many waiting sagas is a few queries, not one round trip per saga.
                for start in range(0, len(active), SWEEP_CHUNK):
                    chunk = active[start : start + SWEEP_CHUNK]
                    try:
                        found = self.fleet.repo.load_many(chunk)
                    except SagaError as exc:
                        report.errors.append(f"reading {len(chunk)} sagas: {exc}")
                        continue
                    for saga_id, loaded in found.items():
                        report.active += 1
                        self._sweep_saga(saga_id, loaded, report)
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK,))
        return report

    def _active_ids(self) -> list[str]:
        with self.fleet.store.connection() as conn:
            rows = conn.execute(
                "SELECT saga_id FROM fleet.active_sagas ORDER BY started_at"
            ).fetchall()
        return [row[0] for row in rows]

    def _sweep_saga(
        self, saga_id: str, loaded: LoadedSaga | SagaError, report: SweepReport
    ) -> None:
        if isinstance(loaded, SagaNotFound):
            return
        if isinstance(loaded, SagaError):
            report.errors.append(f"{saga_id}: {loaded}")
            return
        try:
            swept = sweep_saga(self.fleet.orchestrator, loaded, self.queue_wait)
        except SagaError as exc:
            # A lost race (someone else is busy with it) or a bad stream: next pass.
            report.errors.append(f"{saga_id}: {exc}")
            return
        for item in swept.due:
            self._count(saga_id, item.step_id, item.kind.value if item.kind else None,
                        item.attempt, item.action)
        if swept.committed is not None:
            report.advanced += 1
            self.fleet.publisher.publish(swept.committed.wake_ups)
        if swept.republish:
            report.republished += self.fleet.publisher.publish(swept.republish)

    def _count(
        self, saga_id: str, step_id: str | None, kind: str | None, attempt: int, action: str
    ) -> None:
        with self.fleet.store.connection() as conn:
            conn.execute(
                "INSERT INTO fleet.redeliveries (saga_id, step_id, kind, attempt, action)"
                " VALUES (%s, %s, %s, %s, %s)",
                (saga_id, step_id, kind, attempt, action),
            )

    def run_forever(self, interval_s: float, *, stop_after: float | None = None,
                    heartbeat: Path | None = None) -> None:
        """Sweep every ``interval_s`` seconds (woken early by new events).

        ``heartbeat``, when given, is touched after every pass that reached the database
        (a sweep, or standing by while another copy holds the lock): a health check reads
        its age, as compose.yaml's does.
        """
        deadline = None if stop_after is None else time.monotonic() + stop_after
        while deadline is None or time.monotonic() < deadline:
            try:
                report = self.sweep()
                if report.republished or report.advanced or report.errors:
                    log.info("sweep: %s", report)
                if heartbeat is not None:
                    heartbeat.touch()
            except SagaError as exc:
                log.error("sweep failed (will retry): %s", exc)
            time.sleep(interval_s)
