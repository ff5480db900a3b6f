"""The sweeper: finds in the log what is due and not in flight, and re-enqueues it.

Redis is lossy by design; this is what makes that harmless. What one saga needs is
:func:`sweep_saga` (no tables of its own, so the in-memory test kit sweeps with it too);
for each item of ``saga_core.due_work``:

* a schedule or lookup overdue by more than the expected queue wait → re-publish;
* an expired lease, an expired approval, or anything else decide wants → record it
  (one commit), and publish what that commit made due.

The :class:`Sweeper` adds the PostgreSQL bookkeeping. A pass reads only the sagas that are
due: every commit sets its saga's due time (``saga_core.engine.due.next_due``, in the append
itself), and the pass reads ``SagaLog.due(now)`` 500 at a time, sweeps each, and then
re-times each saga it read, in one statement per chunk (:func:`retimed`): a re-published
item is not due again before its growing window ends (``saga_core.engine.due.republish_at``,
gaps from the queue wait up to ``republish_max_s``), so with no worker at all the
copies of one item stay few. A commit between the read and the re-timing wins (the
deferral applies only at the version read). A chunk's messages are published together,
after its commits: a Redis round trip for its re-enqueues and one for what its commits made
due (kombu's publish batch). Every re-enqueue is counted in ``fleet.redeliveries`` (retry
amplification), one INSERT per chunk.

It keeps ``fleet.active_sagas`` (a rebuildable projection of SagaStarted/SagaFinished,
checkpointed in the same transaction), and every ``sweep_full_every_s`` (and at its first
pass) it sweeps every active saga instead, re-timing each: the repair of a due time that
is wrong (a saga written by an older version, a lost deferral). A saga it cannot sweep (a
lost race, a corrupt stream) is reported and the pass goes on with the next. Several
copies may run: an advisory lock lets one sweep at a time, the others stand by.

A pass may be given a budget (``sweep(budget_s=...)``; ``run_forever`` gives each pass its
interval): after a broker loss every active saga is overdue at once, and a pass over all of
them would hold up everything else the sweeper owes. A budgeted pass first sweeps what came
due since the previous pass (an approval or a lease expiring, a deadline: the fresh duties,
whatever the backlog), then works through the rest, the longest due first, a chunk at a
time until the budget is spent (one chunk at least); the next pass goes on from there (a
full pass from where it stopped in the list of active sagas), at once while a backlog is
left. Every chunk is re-timed as it is done, so nothing is swept twice and the re-publish
count stays that of one pass.

A backlog may be spread over helper processes (``FleetConfig.sweeper_processes``,
``SAGAFLEET_SWEEPER_PROCESSES``): folding a saga and asking what is due is CPU-bound Python
(one process sweeps about 2,300 overdue trips a second), so after a broker loss one process
takes ~40 s over 100k sagas whatever the cores. With helpers, each round reads as many
chunks as there are helpers and sweeps them side by side, each helper with a fleet of its
own on the same servers and the machine's clock (:func:`sweep_chunk`, the same code as the
sweeper's own); the sweeper keeps the lock, the budget and the report. A chunk a helper
could not sweep (it died, or the helpers cannot start) is reported and swept by the sweeper
itself, so a broken helper never stops the sweeping (a saga the helper had already
re-published gets one copy more: a duplicate message is a no-op claim); the pool is started
again at the next round. Without helpers (the default) the sweeper sweeps in its own
process, as before.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from application.messages import StepCommand
from application.orchestrator import Committed, Orchestrator, utc_now
from events import SubscriptionBusy
from events.saga_log.port import DueSaga, LoadedSaga
from events.saga_log.streams import SagaNotFound, saga_id_of
from saga_core import due_work
from saga_core.engine.claims import DueWork
from saga_core.engine.due import due_key, next_due, republish_at
from saga_core.errors import ErrorKind, SagaError

if TYPE_CHECKING:  # the Sweeper's fleet; sweep_saga needs none (the test kit imports it)
    from saga_core.definitions.catalogue import ToolCatalogue
    from workers.fleet import Fleet, FleetConfig

log = logging.getLogger(__name__)

TRACKER = "fleet.active_sagas"
SWEEP_LOCK = 0x5A6A_0001
SWEEP_CHUNK = 500  # active sagas read per query


class SweeperMisconfigured(SagaError):
    """No queue wait, a longest re-publish gap shorter than the queue wait the gaps grow
    from, or helper processes for a fleet whose clock is not the machine's."""

    kind = ErrorKind.MISCONFIGURED


@dataclass
class SweepReport:
    """What one pass found and did."""

    tracked: int = 0
    active: int = 0  # sagas read and swept: the due ones (every active one on a full pass)
    republished: int = 0
    advanced: int = 0
    deferred: int = 0  # sagas re-timed by the pass (a commit in between wins, uncounted)
    full_pass_s: float | None = None  # how long a full pass took (None: none ended in this pass)
    backlog: bool = False  # the budget ran out with due sagas (or a full pass) left for later
    expired_refs: int = 0  # deposited secrets forgotten: expired, spent or not
    expired_nonces: int = 0  # signed commands' single-use ids past their window
    errors: list[str] = field(default_factory=list)

    def add(self, chunk: SweepReport) -> None:
        """Count in what one chunk's sweep (:func:`sweep_chunk`) found and did."""
        self.active += chunk.active
        self.republished += chunk.republished
        self.advanced += chunk.advanced
        self.deferred += chunk.deferred
        self.errors.extend(chunk.errors)


@dataclass(frozen=True)
class SagaSweep:
    """What sweeping one saga found due, and what it recorded for it."""

    loaded: LoadedSaga  # the saga as it was swept
    at: datetime  # the clock the sweep asked due_work at
    due: tuple[DueWork, ...]
    republish: tuple[StepCommand, ...]  # overdue schedules and lookups, to enqueue again
    committed: Committed | None  # decide's answer to the rest (None: nothing needed it)

    @property
    def latest(self) -> LoadedSaga:
        """The saga as the sweep left it (after its commit, if any)."""
        return self.committed.loaded if self.committed is not None else self.loaded

    @property
    def made_due(self) -> tuple[StepCommand, ...]:
        """What the sweep's commit (if any) made due, to publish once it is done."""
        return self.committed.wake_ups if self.committed is not None else ()

    @property
    def wake_ups(self) -> tuple[StepCommand, ...]:
        """Every command to publish, once the commit (if any) is done."""
        return (*self.republish, *self.made_due)


def sweep_saga(orchestrator: Orchestrator, loaded: LoadedSaga, queue_wait: timedelta) -> SagaSweep:
    """Find what is due in one saga now and record what needs a decision; publish nothing.

    Raises SagaError (RaceLost among them) when the decision cannot be recorded.
    """
    at = orchestrator.clock()
    due = due_work(loaded.state, at, queue_wait)
    republish = tuple(
        StepCommand(saga_id=loaded.saga_id, step_id=item.step_id, kind=item.kind,
                    attempt=item.attempt)
        for item in due
        if item.action in ("execute", "reconcile") and item.step_id and item.kind
    )
    needs_decision = len(republish) < len(due)
    committed = orchestrator.advance(loaded.saga_id, known=loaded) if needs_decision else None
    return SagaSweep(loaded, at, tuple(due), republish, committed)


def retimed(
    swept: SagaSweep, now: datetime, queue_wait: timedelta, republish_max: timedelta
) -> DueSaga:
    """When the sweeper should look at a swept saga again, at the version it left it.

    An item still due after the sweep (re-published, or one decide could not settle) is
    not due again before its window ends (``republish_at``: growing gaps from the queue
    wait, capped); whatever else the saga holds is due at ``next_due`` without those
    items. None: nothing will be due until a new event.

    What is still due is what the sweep found when it committed nothing and ``now`` is the
    sweep's own clock (the same state at the same instant: ``due_work`` is pure, and asks
    decide, so it is not asked twice), and ``next_due`` starts from that answer too;
    :func:`retimed_afresh` asks again every time, the plain path this one must equal.
    """
    saga = swept.latest
    if swept.committed is None and swept.at == now:
        return _retimed(swept, swept.due, now, queue_wait, republish_max, known=swept.due)
    if not swept.due:  # nothing was due: nothing is held back
        return _retimed(swept, (), now, queue_wait, republish_max, known=None)
    due_now = due_work(saga.state, now, queue_wait)
    return _retimed(swept, due_now, now, queue_wait, republish_max, known=due_now)


def retimed_afresh(
    swept: SagaSweep, now: datetime, queue_wait: timedelta, republish_max: timedelta
) -> DueSaga:
    """:func:`retimed`, asking ``due_work`` what is still due whatever the sweep did."""
    saga = swept.latest
    due_now = due_work(saga.state, now, queue_wait) if swept.due else []
    return _retimed(swept, due_now, now, queue_wait, republish_max, known=None)


def _retimed(swept: SagaSweep, due_now: Sequence[DueWork], now: datetime,
             queue_wait: timedelta, republish_max: timedelta, *,
             known: Sequence[DueWork] | None) -> DueSaga:
    """``due_now``: what is still due of what the sweep found; ``known``: all ``due_work``
    lists for the saga at ``now``, when that is known (``next_due`` starts from it)."""
    saga = swept.latest
    still = {due_key(item) for item in due_now}
    held = [item for item in swept.due if due_key(item) in still]
    later = next_due(saga.state, queue_wait, after=now, exclude={due_key(i) for i in held},
                     known=known)
    windows = [republish_at(item.due_since, now, queue_wait, republish_max) for item in held]
    return DueSaga(saga.saga_id, saga.version,
                   min((t for t in (later, *windows) if t is not None), default=None))


@dataclass
class _FullPass:
    """A full pass spread over budgeted passes: the active sagas when it began, how far it
    got, and when it began (time.monotonic())."""

    ids: list[str]
    started: float
    next: int = 0


class Sweeper:
    """Re-enqueues due work from the log; safe to run as several copies."""

    def __init__(self, fleet: Fleet, *, chunk: int = SWEEP_CHUNK,
                 helpers: int | None = None) -> None:
        """``chunk``: sagas read, swept and re-timed together (a budgeted pass checks its
        budget between rounds of chunks, and always sweeps at least one round of its
        backlog). ``helpers``: processes a round's chunks are spread over (default: the
        fleet's ``sweeper_processes``; 0: this process sweeps alone). Helpers run on the
        machine's clock, so a fleet on another clock (a test's) cannot have them. They are
        spawned: a script of your own that builds a Sweeper with helpers needs the usual
        ``if __name__ == "__main__":`` guard around what it runs (``sagafleet sweeper`` has
        it)."""
        self.fleet = fleet
        self.chunk = chunk
        self.helpers = fleet.config.sweeper_processes if helpers is None else helpers
        if self.helpers < 0:
            raise SweeperMisconfigured(f"helpers must be 0 or more, got {self.helpers}")
        if self.helpers and fleet.clock is not utc_now:
            raise SweeperMisconfigured(
                "sweeper helper processes run on the machine's clock; this fleet has another "
                "(a test's): sweep with helpers=0")
        self._pool: ProcessPoolExecutor | None = None
        self.queue_wait = timedelta(seconds=fleet.config.queue_wait_s)
        self.republish_max = timedelta(seconds=fleet.config.republish_max_s)
        if not timedelta(0) < self.queue_wait <= self.republish_max:
            raise SweeperMisconfigured(
                f"need 0 < queue_wait_s ({fleet.config.queue_wait_s}) <= republish_max_s "
                f"({fleet.config.republish_max_s}): re-publish gaps grow from the queue wait "
                "up to the maximum")
        self.full_every_s = fleet.config.sweep_full_every_s
        self._subscription = fleet.store.subscription(TRACKER)
        self.vault = fleet.secrets
        self._last_full: float | None = None  # time.monotonic() of this copy's last full pass
        self._full: _FullPass | None = None  # a full pass under way (budgeted passes)
        self._swept_until: datetime | None = None  # the clock of the last pass's due read

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

    def sweep(self, budget_s: float | None = None) -> SweepReport:
        """One pass: track new sagas, then re-enqueue or record what is due (every active
        saga on a full pass, else only the due ones). With ``budget_s``, what came due since
        the last pass first, then the rest until about ``budget_s`` seconds are spent (the
        next pass goes on; ``report.backlog`` says some is left)."""
        report = SweepReport()
        deadline = None if budget_s is None else time.monotonic() + budget_s
        with self.fleet.store.connection() as lock_conn:
            got = lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (SWEEP_LOCK,)).fetchone()
            if not got or not got[0]:
                # Another sweeper is at work: what came due meanwhile is its to sweep, and
                # this copy's next pass has no "since the last pass" of its own.
                self._swept_until = None
                return report
            try:
                report.tracked = self.track()
                # A deposited secret no start used in time is forgotten, as a finished
                # saga's secrets are (a spent ref's row only remembers who spent it).
                report.expired_refs = self.vault.purge_expired(self.fleet.clock())
                # A signed command's id is kept only while a copy could pass the window
                # check; after that the check alone refuses it (a bounded table).
                report.expired_nonces = self.fleet.command_nonces.purge_expired(
                    self.fleet.clock())
                if deadline is None:
                    self._whole_pass(report)
                else:
                    self._budgeted_pass(report, deadline)
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK,))
        return report

    def _whole_pass(self, report: SweepReport) -> None:
        """Every due saga (every active one on a full pass, or the rest of one under way),
        however long it takes."""
        if self._full is not None or self._full_pass_due():
            full = self._full or _FullPass(self._active_ids(), time.monotonic())
            self._continue_full(full, report, set(), deadline=None)
        else:
            self.sweep_due(report)

    def _budgeted_pass(self, report: SweepReport, deadline: float) -> None:
        """What came due since the last pass, then the backlog (a full pass, or the due
        sagas longest due first) until ``deadline``."""
        now = self.fleet.orchestrator.clock()
        seen: set[str] = set()
        if self._swept_until is not None:  # whole: what came due in one interval
            self._sweep_due_between(report, now, seen, since=self._swept_until, deadline=None)
        if self._full is not None or self._full_pass_due():
            full = self._full or _FullPass(self._active_ids(), time.monotonic())
            report.backlog = not self._continue_full(full, report, seen, deadline=deadline)
        else:
            report.backlog = self._sweep_due_between(report, now, seen, since=None,
                                                     deadline=deadline)
        self._swept_until = now

    def _continue_full(self, full: _FullPass, report: SweepReport, seen: set[str], *,
                       deadline: float | None) -> bool:
        """Sweep the full pass's next chunks until it ends (True: it ended, and is timed) or
        ``deadline`` after one chunk at least (False: kept to go on with at the next pass)."""
        self._full = full
        first = True
        while full.next < len(full.ids):
            if deadline is not None and not first and time.monotonic() >= deadline:
                return False
            first = False
            chunks: list[tuple[list[str], dict[str, int]]] = []
            for _ in range(self._width):
                chunk = [i for i in full.ids[full.next:full.next + self.chunk] if i not in seen]
                full.next += self.chunk
                seen.update(chunk)
                # No version known: an unreadable saga is left to the due passes.
                chunks.append((chunk, {}))
            self._sweep_chunks(chunks, report)
        self._full = None
        self._last_full = time.monotonic()
        report.full_pass_s = self._last_full - full.started
        return True

    def _full_pass_due(self) -> bool:
        if self.full_every_s <= 0:
            return False
        return self._last_full is None or time.monotonic() - self._last_full >= self.full_every_s

    def sweep_due(self, report: SweepReport) -> None:
        """Sweep the sagas due by now, a chunk (one read, one re-timing, one count) at a
        time, each saga at most once a pass (a commit may leave one due again at once)."""
        now = self.fleet.orchestrator.clock()  # the clock sweep_saga decides on
        self._sweep_due_between(report, now, set(), since=None, deadline=None)
        self._swept_until = now

    def _sweep_due_between(self, report: SweepReport, now: datetime, seen: set[str], *,
                           since: datetime | None, deadline: float | None) -> bool:
        """Sweep the sagas due by ``now`` (after ``since``), the longest due first, a chunk
        at a time, skipping and adding to ``seen``; stop at ``deadline`` (monotonic) after
        one chunk at least (a pass always makes headway). True when it stopped there with
        due sagas left."""
        first = True
        while True:
            due = [d for d in self.fleet.repo.due(now, self.chunk * self._width, since=since)
                   if d.saga_id not in seen]
            if not due:
                return False
            if deadline is not None and not first and time.monotonic() >= deadline:
                return True
            first = False
            seen.update(d.saga_id for d in due)
            rounds = [due[at:at + self.chunk] for at in range(0, len(due), self.chunk)]
            self._sweep_chunks([([d.saga_id for d in part], {d.saga_id: d.version for d in part})
                                for part in rounds], report)

    def sweep_all(self, report: SweepReport) -> None:
        """Sweep every active saga (``fleet.active_sagas``) and re-time each: the slow pass
        that repairs a wrong due time."""
        self._continue_full(_FullPass(self._active_ids(), time.monotonic()), report, set(),
                            deadline=None)

    @property
    def _width(self) -> int:
        """Chunks swept in one round: one per helper, or one."""
        return max(1, self.helpers)

    def _sweep_chunks(self, chunks: list[tuple[list[str], dict[str, int]]],
                      report: SweepReport) -> None:
        """Sweep a round's chunks: here one after the other, or side by side in helpers."""
        chunks = [(ids, versions) for ids, versions in chunks if ids]
        if not self.helpers or len(chunks) < 2:
            for saga_ids, versions in chunks:
                report.add(self._sweep_here(saga_ids, versions))
            return
        try:
            pool = self._helpers()
            sent = [(ids, versions, pool.submit(_helper_sweep, ids, versions,
                                                self.queue_wait, self.republish_max))
                    for ids, versions in chunks]
        except Exception as exc:  # noqa: BLE001 - the helpers cannot start: swept here
            report.errors.append(f"sweeper helpers unavailable (swept by the sweeper): {exc!r}")
            self._stop_helpers()  # started again at the next round
            for saga_ids, versions in chunks:
                report.add(self._sweep_here(saga_ids, versions))
            return
        lost = False
        for ids, versions, future in sent:
            try:
                report.add(future.result())
            except Exception as exc:  # noqa: BLE001 - a helper's death: its chunk swept here
                report.errors.append(f"a sweeper helper lost a chunk of {len(ids)} sagas "
                                     f"(swept by the sweeper instead): {exc!r}")
                report.add(self._sweep_here(ids, versions))
                lost = True
        if lost:  # started again at the next round
            self._stop_helpers()

    def _sweep_here(self, saga_ids: list[str], versions: Mapping[str, int]) -> SweepReport:
        return sweep_chunk(self.fleet, saga_ids, versions, queue_wait=self.queue_wait,
                           republish_max=self.republish_max)

    def _helpers(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.helpers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_helper,
                initargs=(self.fleet.config, self.fleet.catalogue))
        return self._pool

    def start_helpers(self) -> None:
        """Start every helper process now (each opens its fleet) instead of at the first
        round that needs them."""
        list(self._helpers().map(_helper_ready, range(self.helpers)))

    def _stop_helpers(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Stop the helper processes, if any (the fleet stays open: its owner closes it)."""
        self._stop_helpers()

    def _active_ids(self) -> list[str]:
        with self.fleet.store.connection() as conn:
            rows = conn.execute(
                "SELECT saga_id FROM fleet.active_sagas ORDER BY started_at"
            ).fetchall()
        return [row[0] for row in rows]

    def run_forever(self, interval_s: float, *, stop_after: float | None = None,
                    heartbeat: Path | None = None) -> None:
        """Sweep every ``interval_s`` seconds (woken early by new events).

        ``heartbeat``, when given, is touched after every pass that reached the database
        (a sweep, or standing by while another copy holds the lock): a health check reads
        its age, as compose.yaml's does. Helpers, if any, are started first: a backlog
        that comes later (a broker loss) does not wait for their start.
        """
        deadline = None if stop_after is None else time.monotonic() + stop_after
        if self.helpers:
            try:
                self.start_helpers()
            except Exception as exc:  # noqa: BLE001 - each round tries again, sweeping anyway
                log.error("sweeper helpers did not start (this process sweeps meanwhile): %r",
                          exc)
                self._stop_helpers()
        while deadline is None or time.monotonic() < deadline:
            try:
                # A budget of one interval: a backlog (every saga overdue after a broker loss)
                # is worked off over several passes, each serving what came due since the last.
                report = self.sweep(budget_s=interval_s)
                if report.republished or report.advanced or report.errors:
                    log.info("sweep: %s", report)
                if heartbeat is not None:
                    heartbeat.touch()
            except SagaError as exc:
                log.error("sweep failed (will retry): %s", exc)
            else:
                if report.backlog:
                    continue  # more is due now: the next pass starts at once
            time.sleep(interval_s)


def sweep_chunk(fleet: Fleet, saga_ids: list[str], versions: Mapping[str, int], *,
                queue_wait: timedelta, republish_max: timedelta) -> SweepReport:
    """Read the sagas in one query, sweep each, then re-time them and count what was
    re-enqueued, one statement each (the sweeper's own work on a chunk, and a helper's);
    what it found and did (:meth:`SweepReport.add` counts it into a pass's report).

    ``versions``: the version each saga was found due at. A saga that cannot be read
    or swept there (a corrupt stream, a definition gone) is put off by the longest
    re-publish gap: reported again then, not every pass.
    """
    report = SweepReport()
    try:
        found = fleet.repo.load_many(saga_ids)
    except SagaError as exc:
        report.errors.append(f"reading {len(saga_ids)} sagas: {exc}")
        return report
    now = fleet.orchestrator.clock()
    put_off = now + republish_max
    deferrals: list[DueSaga] = []
    redelivered: list[DueWork] = []
    woken: list[StepCommand] = []  # what the chunk's commits made due, after them
    republish: list[StepCommand] = []
    for saga_id, loaded in found.items():
        if isinstance(loaded, SagaNotFound):
            continue
        if isinstance(loaded, SagaError):
            report.errors.append(f"{saga_id}: {loaded}")
            if saga_id in versions:
                deferrals.append(DueSaga(saga_id, versions[saga_id], put_off))
            continue
        report.active += 1
        try:
            swept = sweep_saga(fleet.orchestrator, loaded, queue_wait)
        except SagaError as exc:
            # A lost race (someone else is busy with it: its commit re-timed it, and
            # this deferral, at the version read, changes nothing) or a bad stream.
            report.errors.append(f"{saga_id}: {exc}")
            deferrals.append(DueSaga(saga_id, loaded.version, put_off))
            continue
        if swept.committed is not None:
            report.advanced += 1
        woken.extend(swept.made_due)
        republish.extend(swept.republish)
        redelivered.extend(swept.due)
        # Re-timed at the instant it was swept (a chunk's sagas are swept one by one).
        deferrals.append(retimed(swept, swept.at, queue_wait, republish_max))
    # The chunk's messages go in two batches (one Redis round trip each), after its
    # commits; a message that fails to go is left to the saga's next due time.
    fleet.publisher.publish(woken)
    report.republished += fleet.publisher.publish(republish)
    report.deferred += fleet.repo.defer(deferrals)
    _count(fleet, redelivered)
    return report


def _count(fleet: Fleet, items: Sequence[DueWork]) -> None:
    """Record each re-enqueued or decided item in ``fleet.redeliveries``, one INSERT."""
    if not items:
        return
    # One JSON document, not five arrays: psycopg dumps an array element by element,
    # which cost the pass more CPU than the server's insert of a chunk's rows.
    rows = json.dumps([[i.saga_id, i.step_id, i.kind.value if i.kind else None, i.attempt,
                        i.action] for i in items])
    with fleet.store.connection() as conn:
        conn.execute(
            "INSERT INTO fleet.redeliveries (saga_id, step_id, kind, attempt, action)"
            " SELECT r ->> 0, r ->> 1, r ->> 2, (r ->> 3)::int, r ->> 4"
            " FROM jsonb_array_elements(%s::jsonb) AS r",
            (rows,),
        )


# -- helper processes --------------------------------------------------------------------------

_helper_fleet: Fleet | None = None
"""A helper process's fleet (opened by :func:`_start_helper`; None in any other process)."""


def _start_helper(config: FleetConfig, catalogue: ToolCatalogue) -> None:
    """A helper process's start: a fleet of its own (tools: the catalogue only; it decides,
    it calls none), closed at the helper's exit."""
    import atexit

    from workers.fleet import Fleet

    global _helper_fleet  # noqa: PLW0603 - the pool's initializer hands its tasks the fleet
    _helper_fleet = Fleet(config, catalogue)
    atexit.register(_helper_fleet.close)


def _helper_ready(_: int) -> bool:
    """Nothing: a task whose running proves a helper started."""
    return _helper_fleet is not None


def _helper_sweep(saga_ids: list[str], versions: dict[str, int], queue_wait: timedelta,
                  republish_max: timedelta) -> SweepReport:
    """Sweep one chunk in a helper process with the sweeper's own timings; what it found
    and did."""
    if _helper_fleet is None:  # the initializer failed: the sweeper sweeps the chunk itself
        raise RuntimeError("this sweeper helper has no fleet")
    return sweep_chunk(_helper_fleet, saga_ids, versions, queue_wait=queue_wait,
                       republish_max=republish_max)
