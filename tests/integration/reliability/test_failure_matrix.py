"""The failure matrix: every trip step and every compensation × every failure boundary.

One fleet run carries the whole matrix: each cell is its own saga with its faults scoped to
its saga id, all running at once on real worker processes (a few of which are SIGKILLed on
purpose). Each parametrized test then reads one cell's outcome and asserts the business
invariant from the providers' ledgers *and* the journal, not only the state label.

Boundaries (columns):

* ``before_dispatch``  — the request never reached the provider, the caller timed out
  (``timeout_before_dispatch``): reconcile → absent → retry with the same key;
* ``during_dispatch``  — the provider failed mid-request, nothing committed
  (``fail_before_commit``, 503): a transient failure, retried with the same key;
* ``after_commit``     — the provider committed, the response was lost
  (``commit_then_timeout``): reconcile → found, never dispatched twice;
* ``before_receipt``   — the tool returned but the worker died before persisting the receipt
  (SIGKILL while frozen right after the provider's commit): lease expires → reconcile → found;
* ``business_rejection`` (forward) and ``compensation_failure`` / ``_permanent``,
  ``target_changed`` (compensation).

The pivot's compensation (``email.send_correction``) is unreachable in the trip saga: once
the pivot succeeded nothing is compensated, so there is no compensation row for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fleet_harness import (
    BOUNCING_INPUT,
    TRIP_INPUT,
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

from events.sagas import LoadedSaga
from saga_core.contracts import ErrorClass, SagaStatus, StepKind
from saga_core.events import (
    CompensationStarted,
    ManualInterventionRequired,
    ReconciliationResult,
    ReconciliationScheduled,
    SagaEvent,
    StepFailed,
    StepOutcomeUnknown,
    StepStarted,
    StepSucceeded,
)
from saga_core.state import RunStatus
from sagafleet.sandbox import FaultInjector, TripLedger, build_trip_sandbox, ledger_for_saga
from workers.orchestrator import utc_now

FWD, COMP = StepKind.FORWARD, StepKind.COMPENSATION
FORWARD_STEPS = ("hold_flight", "hold_hotel", "capture_payment", "send_itinerary")
COMPENSATED_STEPS = ("hold_flight", "hold_hotel", "capture_payment")
AMOUNT = TRIP_INPUT["amount"]


@dataclass(frozen=True)
class Cell:
    """One saga of the matrix: a step's operation, where it fails, and how."""

    step: str
    kind: StepKind
    boundary: str
    rules: tuple[tuple[str, int | None, dict[str, Any]], ...] = ()  # (fault, count, params)
    freeze: bool = False
    reuse_key: bool = False

    @property
    def id(self) -> str:
        return f"{self.step}.{self.kind.value}.{self.boundary}"

    @property
    def input(self) -> dict[str, Any]:
        # A compensation only runs when the saga unwinds: the pivot's recipient bounces.
        return BOUNCING_INPUT if self.kind is COMP else TRIP_INPUT


@dataclass
class Outcome:
    """What one cell ended as: the state, the journal and the providers' ledgers."""

    status: SagaStatus
    events: list[SagaEvent]
    ledger: TripLedger
    killed_pid: int | None = None
    # For a saga left waiting out a commit horizon: its journal and ledger at that point.
    parked_events: list[SagaEvent] = field(default_factory=list)
    parked_ledger: TripLedger | None = None

    def of(self, cell: Cell, *types: type) -> list[Any]:
        """The cell's step events of the given types, for its operation (step and kind)."""
        return [e for e in self.events if isinstance(e, types)
                and getattr(e, "step_id", None) == cell.step and e.kind is cell.kind]


def _cells() -> list[Cell]:
    cells: list[Cell] = []
    for step in FORWARD_STEPS:
        cells += [
            Cell(step, FWD, "before_dispatch", (("timeout_before_dispatch", 1, {}),)),
            Cell(step, FWD, "during_dispatch", (("fail_before_commit", 1, {}),)),
            Cell(step, FWD, "after_commit", (("commit_then_timeout", 1, {}),)),
            Cell(step, FWD, "before_receipt", freeze=True),
            Cell(step, FWD, "business_rejection", (("business_rejection", 1, {}),)),
        ]
    for step in COMPENSATED_STEPS:
        cells += [
            Cell(step, COMP, "before_dispatch", (("timeout_before_dispatch", 1, {}),)),
            Cell(step, COMP, "during_dispatch", (("fail_before_commit", 1, {}),)),
            Cell(step, COMP, "after_commit", (("commit_then_timeout", 1, {}),)),
            Cell(step, COMP, "before_receipt", freeze=True),
            Cell(step, COMP, "compensation_failure", (("compensation_failure", 1, {}),)),
            Cell(step, COMP, "compensation_failure_permanent",
                 (("compensation_failure", None, {"error_class": "permanent"}),)),
            Cell(step, COMP, "target_changed", (("target_changed", None, {}),)),
        ]
    cells += [
        # The response is lost and every lookup fails: unproven → MANUAL_INTERVENTION.
        Cell("capture_payment", FWD, "after_commit_lookup_unavailable",
             (("commit_then_timeout", 1, {}), ("lookup_unavailable", None, {}))),
        # Committed, response lost, and not yet visible to lookup: "absent" proves nothing,
        # the retry with the same key is replayed by the provider, one hold.
        Cell("hold_hotel", FWD, "after_commit_slow_visibility",
             (("slow_visibility", 1, {"delay_s": 300.0}), ("commit_then_timeout", 1, {}))),
        # The operation key was already used with another payload: refused loudly, no 2nd hold.
        Cell("hold_flight", FWD, "key_reused_with_other_payload", reuse_key=True),
    ]
    return cells


CELLS = {cell.id: cell for cell in _cells()}


@pytest.fixture(scope="module")
def matrix(pg_server_url: str, broker_url: str, tmp_path_factory) -> Iterator[dict[str, Outcome]]:
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
            saga_of = {cid: client.start("trip", cell.input, key=cid).saga_id
                       for cid, cell in CELLS.items()}
            # No worker runs yet: arm every cell's faults on its own saga only.
            sandbox = build_trip_sandbox(fleet.sandbox_pool)
            for cid, cell in CELLS.items():
                provider, operation = TRIP_TOOLS[(cell.step, cell.kind)]
                for boundary, count, params in cell.rules:
                    faults.add(provider, operation, boundary, saga_id=saga_of[cid],
                               count=count, params=params)
                if cell.freeze:
                    freezes[cid] = AfterCommitFreeze(fleet, faults, saga_of[cid], cell.step,
                                                     cell.kind)
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
                cid: Outcome(
                    status=fleet.repo.load(sid).state.status,
                    events=events_of(fleet, sid),
                    ledger=ledger_for_saga(fleet.sandbox_pool, sid),
                    killed_pid=freezes[cid].killed_pid if cid in freezes else None,
                    parked_events=parked.get(sid, ([], None))[0],
                    parked_ledger=parked.get(sid, ([], None))[1],
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
    """A lookup scheduled far ahead: a non-deduping tool waiting out its commit horizon."""
    soon = utc_now() + timedelta(seconds=30)
    return any(run.status is RunStatus.RECONCILING and run.not_before is not None
               and run.not_before > soon
               for run in [*loaded.state.forward.values(), *loaded.state.compensation.values()])


# -- expectations --------------------------------------------------------------------------


def _one_operation_key(out: Outcome, cell: Cell) -> None:
    keys = {e.operation_key for e in out.of(cell, StepStarted)}
    assert len(keys) == 1, f"attempts used several operation keys: {keys}"


def _completed(out: Outcome) -> None:
    assert out.status is SagaStatus.COMPLETED
    assert out.ledger.is_complete_trip and not out.ledger.duplicates
    assert out.ledger.net_charge == AMOUNT and out.ledger.itineraries_sent == 1


def _compensated(out: Outcome) -> None:
    assert out.status is SagaStatus.COMPENSATED
    assert out.ledger.is_unwound and not out.ledger.duplicates
    assert out.ledger.net_charge == 0 and out.ledger.itineraries_sent == 0
    assert any(isinstance(e, CompensationStarted) for e in out.events)


def _settled(out: Outcome, cell: Cell) -> None:
    """Forward cells complete the trip; compensation cells unwind it completely."""
    if cell.kind is FWD:
        _completed(out)
    else:
        _compensated(out)
        assert out.ledger.captures == 1 and out.ledger.refunded == AMOUNT


def _retried_after_timeout(out: Outcome, cell: Cell) -> None:
    unknown = out.of(cell, StepOutcomeUnknown)
    assert [(u.attempt, u.reason) for u in unknown] == [(1, "timeout")]
    assert [r.result for r in out.of(cell, ReconciliationResult)] == ["absent"]
    succeeded = out.of(cell, StepSucceeded)
    assert [(s.attempt, s.via) for s in succeeded] == [(2, "execute")]
    _one_operation_key(out, cell)


def _retried_after_transient(out: Outcome, cell: Cell) -> None:
    failed = out.of(cell, StepFailed)
    assert [(f.attempt, f.error_class) for f in failed] == [(1, ErrorClass.TRANSIENT)]
    assert [(s.attempt, s.via) for s in out.of(cell, StepSucceeded)] == [(2, "execute")]
    _one_operation_key(out, cell)


def _found_by_lookup(out: Outcome, cell: Cell, unknown_reason: str) -> None:
    assert [u.reason for u in out.of(cell, StepOutcomeUnknown)] == [unknown_reason]
    assert [r.result for r in out.of(cell, ReconciliationResult)] == ["found"]
    assert [(s.attempt, s.via) for s in out.of(cell, StepSucceeded)] == [(1, "reconcile")]
    assert len(out.of(cell, StepStarted)) == 1, "an operation found by lookup ran again"


def _escalated_on(out: Outcome, cell: Cell, reason_part: str) -> ManualInterventionRequired:
    assert out.status is SagaStatus.MANUAL_INTERVENTION
    assert not out.ledger.duplicates
    (manual,) = [e for e in out.events if isinstance(e, ManualInterventionRequired)]
    assert manual.step_id == cell.step and manual.kind is cell.kind
    assert reason_part in manual.reason
    evidence = manual.evidence
    assert evidence.reason == manual.reason and evidence.alternatives
    assert cell.step in evidence.intended_action
    assert evidence.details["operation_key"] == out.of(cell, StepStarted)[0].operation_key
    return manual


def check_before_dispatch(out: Outcome, cell: Cell) -> None:
    if cell.step == "send_itinerary":
        _waited_out_the_horizon(out, cell)
        return
    _settled(out, cell)
    _retried_after_timeout(out, cell)


def _waited_out_the_horizon(out: Outcome, cell: Cell) -> None:
    """email.send_itinerary cannot dedupe: "absent" after a timeout is no licence to resend."""
    assert out.parked_ledger is not None, "the saga never waited for the commit horizon"
    # Before the horizon: no second dispatch, no itinerary, a lookup scheduled at its end.
    assert out.parked_ledger.itineraries_sent == 0
    parked = Outcome(out.status, out.parked_events, out.parked_ledger)
    assert len(parked.of(cell, StepStarted)) == 1
    (unknown,) = parked.of(cell, StepOutcomeUnknown)
    horizon_lookup = parked.of(cell, ReconciliationScheduled)[-1]
    assert horizon_lookup.not_before >= unknown.at + timedelta(seconds=120)
    # After it: absent again, so it never committed; one retry with the same key, one email.
    _completed(out)
    assert [r.result for r in out.of(cell, ReconciliationResult)] == ["absent", "absent"]
    assert [(s.attempt, s.via) for s in out.of(cell, StepSucceeded)] == [(2, "execute")]
    _one_operation_key(out, cell)


def check_during_dispatch(out: Outcome, cell: Cell) -> None:
    _settled(out, cell)
    _retried_after_transient(out, cell)


def check_after_commit(out: Outcome, cell: Cell) -> None:
    _settled(out, cell)
    _found_by_lookup(out, cell, "timeout")


def _journal(out: Outcome, cell: Cell) -> list[tuple[Any, ...]]:
    """The cell's operation history, compactly (for assertion messages)."""
    return [(type(e).__name__, e.attempt, getattr(e, "via", None) or getattr(e, "reason", None)
             or getattr(e, "result", None), getattr(e, "worker_id", None))
            for e in out.of(cell, StepStarted, StepSucceeded, StepFailed, StepOutcomeUnknown,
                            ReconciliationResult)]


def check_before_receipt(out: Outcome, cell: Cell) -> None:
    history = (out.status, out.killed_pid, _journal(out, cell))
    # The worker that saw the provider's answer was SIGKILLed before recording it ...
    assert out.killed_pid is not None, history
    claims = out.of(cell, StepStarted)
    assert any(c.worker_id.endswith(f":{out.killed_pid}") for c in claims), history
    try:
        _settled(out, cell)  # one effect in the ledger, whatever path recovery took
        if len(claims) == 1:
            # ... so its lease expired, the lookup found the committed effect, no re-run.
            _found_by_lookup(out, cell, "lease_expired")
        else:
            # A machine so loaded that the lease ran out before the provider even committed:
            # the attempt was claimed again (directly, since this provider dedupes by key, or
            # after a lease_expired lookup) with the same key, and the dedupe kept one effect.
            _one_operation_key(out, cell)
            reasons = [u.reason for u in out.of(cell, StepOutcomeUnknown)]
            assert set(reasons) <= {"lease_expired"}, history
    except AssertionError as exc:
        raise AssertionError(f"{exc}; history: {history}") from exc


def check_business_rejection(out: Outcome, cell: Cell) -> None:
    _compensated(out)
    (failed,) = out.of(cell, StepFailed)
    assert failed.error_class is ErrorClass.BUSINESS_REJECTION
    (started,) = [e for e in out.events if isinstance(e, CompensationStarted)]
    assert started.failed_step == cell.step
    undone = {e.step_id for e in out.events
              if isinstance(e, StepSucceeded) and e.kind is COMP}
    done = {e.step_id for e in out.events
            if isinstance(e, StepSucceeded) and e.kind is FWD}
    assert cell.step not in done and undone == done  # exactly what had an effect is undone
    if cell.step in ("hold_flight", "hold_hotel", "capture_payment"):
        assert out.ledger.captures == 0 or cell.step == "send_itinerary"


def check_compensation_failure(out: Outcome, cell: Cell) -> None:
    _settled(out, cell)
    _retried_after_transient(out, cell)


def check_compensation_failure_permanent(out: Outcome, cell: Cell) -> None:
    manual = _escalated_on(out, cell, "permanent failure")
    assert manual.evidence.forward_receipt is not None
    assert "mark_compensated" in manual.evidence.alternatives
    _left_undone(out, cell)


def check_target_changed(out: Outcome, cell: Cell) -> None:
    if cell.step == "capture_payment":
        # The refund declares no version precondition (an offset, not a restore): it proceeds.
        _settled(out, cell)
        return
    manual = _escalated_on(out, cell, "target changed")
    (failed,) = out.of(cell, StepFailed)
    assert failed.error_class is ErrorClass.PRECONDITION_FAILED
    assert manual.evidence.forward_receipt is not None
    _left_undone(out, cell)


def _left_undone(out: Outcome, cell: Cell) -> None:
    """The escalated compensation's effect is still there, exactly once; nothing is doubled."""
    ledger = out.ledger
    assert ledger.captures == 1 and ledger.itineraries_sent == 0
    if cell.step == "capture_payment":
        # The refund comes first (reverse dependency order): the holds wait behind it.
        assert ledger.net_charge == AMOUNT
        assert ledger.active_flight_holds == 1 and ledger.active_hotel_holds == 1
    else:
        assert ledger.net_charge == 0
        held = ledger.active_flight_holds if cell.step == "hold_flight" else \
            ledger.active_hotel_holds
        assert held == 1


def check_after_commit_lookup_unavailable(out: Outcome, cell: Cell) -> None:
    manual = _escalated_on(out, cell, "unproven")
    results = [r.result for r in out.of(cell, ReconciliationResult)]
    assert results and set(results) == {"unknown"}
    assert len(out.of(cell, StepStarted)) == 1, "an unproven charge was dispatched again"
    # The charge did happen exactly once; nothing was undone while its outcome is unknown.
    assert out.ledger.captures == 1 and out.ledger.refunded == 0
    assert out.ledger.active_flight_holds == 1 and out.ledger.active_hotel_holds == 1
    assert manual.evidence.details["status"] in ("unknown", "reconciling")


def check_after_commit_slow_visibility(out: Outcome, cell: Cell) -> None:
    _completed(out)
    assert out.ledger.hotel_holds == 1
    assert [r.result for r in out.of(cell, ReconciliationResult)] == ["absent"]
    assert [(s.attempt, s.via) for s in out.of(cell, StepSucceeded)] == [(2, "execute")]
    _one_operation_key(out, cell)


def check_key_reused_with_other_payload(out: Outcome, cell: Cell) -> None:
    _escalated_on(out, cell, "permanent failure")
    (failed,) = out.of(cell, StepFailed)
    assert failed.error_class is ErrorClass.PERMANENT and "different request" in failed.message
    assert out.ledger.flight_holds == 1  # only the earlier request's hold; no second one
    assert out.ledger.captures == 0


CHECKS: dict[str, Callable[[Outcome, Cell], None]] = {
    name.removeprefix("check_"): fn for name, fn in globals().items()
    if name.startswith("check_") and callable(fn)
}


@pytest.mark.parametrize("cell_id", list(CELLS))
def test_failure_matrix_cell(matrix: dict[str, Outcome], cell_id: str) -> None:
    cell = CELLS[cell_id]
    CHECKS[cell.boundary](matrix[cell_id], cell)
