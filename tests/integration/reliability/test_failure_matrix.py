"""The failure matrix (tests/failure_matrix_spec.py) on real servers and worker processes.

One fleet run carries the whole matrix: each cell is its own saga with its faults scoped to
its saga id (sandbox FaultInjector rules), all running at once on real worker processes (a
few of which are SIGKILLed on purpose: the "before_receipt" cells are frozen right after the
provider's commit, then killed). Each parametrized test then reads one cell's outcome and
asserts the business invariant from the providers' ledgers *and* the journal, not only the
state label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from failure_matrix_spec import (
    CELLS,
    CHECKS,
    FWD,
    WORKER_CRASH_AFTER_COMMIT,
    Cell,
    Outcome,
    recovered_after_lost_receipt,
    waits_out_a_horizon,
)
from fleet_harness import (
    TRIP_TOOLS,
    AfterCommitFreeze,
    WorkerProcesses,
    build_fleet,
    drive,
    events_of,
    migrated_database,
    redis_client,
    settle,
    shifted_fleet,
)
from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from application.orchestrator import utc_now
from events.saga_log.port import LoadedSaga
from saga_core.engine.events import (
    ReconciliationResult,
    StepFailed,
    StepOutcomeUnknown,
    StepStarted,
    StepSucceeded,
)
from sagafleet.sandbox import FaultInjector, build_trip_sandbox, ledger_for_saga


@dataclass
class SandboxOutcome(Outcome):
    """A cell's outcome on real workers, and which of them was SIGKILLed on the way."""

    killed_pid: int | None = None


def _trip(cell: Cell) -> dict[str, Any]:
    return BOUNCING_INPUT if cell.unwinds else TRIP_INPUT


@pytest.fixture(scope="module")
def matrix(pg_server_url: str, broker_url: str,
           tmp_path_factory) -> Iterator[dict[str, SandboxOutcome]]:
    """Run every cell at once on four real workers; yield each cell's outcome."""
    log_dir: Path = tmp_path_factory.mktemp("matrix")
    redis = redis_client(broker_url)
    redis.flushdb()
    with migrated_database(pg_server_url) as database:
        fleet = build_fleet(database, broker_url)
        faults = FaultInjector(fleet.sandbox_pool)
        workers = WorkerProcesses(database, broker_url, log_dir)
        freezes: dict[str, AfterCommitFreeze] = {}
        try:
            client = fleet.client()
            saga_of = {cid: client.start("trip", _trip(cell), key=cid).saga_id
                       for cid, cell in CELLS.items()}
            # No worker runs yet: arm every cell's faults on its own saga only.
            sandbox = build_trip_sandbox(fleet.sandbox_pool)
            for cid, cell in CELLS.items():
                provider, operation = TRIP_TOOLS[(cell.step, cell.kind)]
                for fault, count, params in cell.faults:
                    if fault == WORKER_CRASH_AFTER_COMMIT:
                        # Not a provider fault here: the worker is frozen right after the
                        # provider's commit and SIGKILLed there (kill_frozen below).
                        freezes[cid] = AfterCommitFreeze(fleet, faults, saga_of[cid],
                                                         cell.step, cell.kind)
                        continue
                    faults.add(provider, operation, fault, saga_id=saga_of[cid],
                               count=count, params=params)
                if cell.reuse_key:
                    key = fleet.repo.load(saga_of[cid]).state.run(cell.step, FWD).operation_key
                    sandbox.flights.perform("hold", {"saga_id": saga_of[cid],
                                                     "flight_id": "FL999",
                                                     "passenger_email": "eve@example.com"}, key)
            workers.start(4)

            def kill_frozen() -> None:
                for freeze in freezes.values():
                    freeze.kill_if_frozen(workers)

            settle(fleet, list(saga_of.values()), timeout=180, on_tick=kill_frozen,
                   parked=_waits_out_a_horizon)
            parked = {sid: (events_of(fleet, sid), ledger_for_saga(fleet.sandbox_pool, sid))
                      for sid in saga_of.values()
                      if _waits_out_a_horizon(fleet.repo.load(sid))}
            if parked:
                # Cross the commit horizon on a clock that runs ahead, in this process.
                later = shifted_fleet(database, broker_url, timedelta(minutes=5))
                try:
                    for sid in parked:
                        drive(later, sid)
                finally:
                    later.close()
            yield {
                cid: SandboxOutcome(
                    status=fleet.repo.load(sid).state.status,
                    events=events_of(fleet, sid),
                    ledger=ledger_for_saga(fleet.sandbox_pool, sid),
                    amount=_trip(CELLS[cid])["amount"],
                    parked_events=parked.get(sid, ([], None))[0],
                    parked_ledger=parked.get(sid, ([], None))[1],
                    killed_pid=freezes[cid].killed_pid if cid in freezes else None,
                )
                for cid, sid in saga_of.items()
            }
        finally:
            for freeze in freezes.values():
                freeze.release()
            workers.stop()
            fleet.close()
            redis.flushdb()
            redis.close()


def _waits_out_a_horizon(loaded: LoadedSaga) -> bool:
    return waits_out_a_horizon(loaded.state, utc_now())


def _journal(out: Outcome, cell: Cell) -> list[tuple[Any, ...]]:
    """The cell's operation history, compactly (for assertion messages)."""
    return [(type(e).__name__, e.attempt, getattr(e, "via", None) or getattr(e, "reason", None)
             or getattr(e, "result", None), getattr(e, "worker_id", None))
            for e in out.of(cell, StepStarted, StepSucceeded, StepFailed, StepOutcomeUnknown,
                            ReconciliationResult)]


def check_before_receipt(out: SandboxOutcome, cell: Cell) -> None:
    history = (out.status, out.killed_pid, _journal(out, cell))
    # The worker that saw the provider's answer was SIGKILLed before recording it ...
    assert out.killed_pid is not None, history
    claims = out.of(cell, StepStarted)
    assert any(c.worker_id.endswith(f":{out.killed_pid}") for c in claims), history
    try:
        # ... so its lease expired, the lookup found the committed effect, no re-run; or, on
        # a machine so loaded that the lease ran out before the provider even committed, the
        # attempt was claimed again with the same key and the dedupe kept one effect.
        recovered_after_lost_receipt(out, cell)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; history: {history}") from exc


SANDBOX_CHECKS: dict[str, Callable[[SandboxOutcome, Cell], None]] = {
    **CHECKS, "before_receipt": check_before_receipt,
}


@pytest.mark.parametrize("cell_id", list(CELLS))
def test_failure_matrix_cell(matrix: dict[str, SandboxOutcome], cell_id: str) -> None:
    cell = CELLS[cell_id]
    SANDBOX_CHECKS[cell.boundary](matrix[cell_id], cell)
