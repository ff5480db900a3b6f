"""The failure matrix (tests/integration/reliability/test_failure_matrix.py) on TestFleet.

The same cells and the same checks — journal and the providers' books, not only the state
label — with the in-memory trip tools in place of the sandbox and the test clock in place
of waiting: each cell is one saga on its own fleet, run in a fraction of a second. The
"before_receipt" cells kill the worker with the kit's ``worker_crash_after_commit``
fault instead of a SIGKILL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from kit_harness import AMOUNT, BOUNCING_INPUT, TRIP_INPUT, TRIP_TOOLS

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
from saga_core.state import RunStatus, SagaState
from sagafleet.testing import TestFleet, TripLedger, TripTools

FWD, COMP = StepKind.FORWARD, StepKind.COMPENSATION
FORWARD_STEPS = ("hold_flight", "hold_hotel", "capture_payment", "send_itinerary")
COMPENSATED_STEPS = ("hold_flight", "hold_hotel", "capture_payment")


@dataclass(frozen=True)
class Cell:
    """One saga of the matrix: a step's operation, where it fails, and how."""

    step: str
    kind: StepKind
    boundary: str
    rules: tuple[tuple[str, int | None, dict[str, Any]], ...] = ()  # (fault, times, params)
    reuse_key: bool = False

    @property
    def id(self) -> str:
        return f"{self.step}.{self.kind.value}.{self.boundary}"

    @property
    def input(self) -> dict[str, Any]:
        return BOUNCING_INPUT if self.kind is COMP else TRIP_INPUT


@dataclass
class Outcome:
    """What one cell ended as: the state, the journal and the books."""

    status: SagaStatus
    events: list[SagaEvent]
    ledger: TripLedger
    crashed: bool = False
    parked_events: list[SagaEvent] = field(default_factory=list)
    parked_ledger: TripLedger | None = None

    def of(self, cell: Cell, *types: type) -> list[Any]:
        """The cell's step events of the given types, for its operation (step and kind)."""
        return [e for e in self.events if isinstance(e, types)
                and getattr(e, "step_id", None) == cell.step and e.kind is cell.kind]


def _cells() -> list[Cell]:
    cells: list[Cell] = []
    crash = (("worker_crash_after_commit", 1, {}),)
    for step in FORWARD_STEPS:
        cells += [
            Cell(step, FWD, "before_dispatch", (("timeout_before_dispatch", 1, {}),)),
            Cell(step, FWD, "during_dispatch", (("fail_before_commit", 1, {}),)),
            Cell(step, FWD, "after_commit", (("commit_then_timeout", 1, {}),)),
            Cell(step, FWD, "before_receipt", crash),
            Cell(step, FWD, "business_rejection", (("business_rejection", 1, {}),)),
        ]
    for step in COMPENSATED_STEPS:
        cells += [
            Cell(step, COMP, "before_dispatch", (("timeout_before_dispatch", 1, {}),)),
            Cell(step, COMP, "during_dispatch", (("fail_before_commit", 1, {}),)),
            Cell(step, COMP, "after_commit", (("commit_then_timeout", 1, {}),)),
            Cell(step, COMP, "before_receipt", crash),
            Cell(step, COMP, "compensation_failure", (("compensation_failure", 1, {}),)),
            Cell(step, COMP, "compensation_failure_permanent",
                 (("compensation_failure", None, {"error_class": "permanent"}),)),
            Cell(step, COMP, "target_changed", (("target_changed", None, {}),)),
        ]
    cells += [
        Cell("capture_payment", FWD, "after_commit_lookup_unavailable",
             (("commit_then_timeout", 1, {}), ("lookup_unavailable", None, {}))),
        Cell("hold_hotel", FWD, "after_commit_slow_visibility",
             (("slow_visibility", 1, {"delay_s": 300.0}), ("commit_then_timeout", 1, {}))),
        Cell("hold_flight", FWD, "key_reused_with_other_payload", reuse_key=True),
    ]
    return cells


CELLS = {cell.id: cell for cell in _cells()}


def run_cell(cell: Cell) -> Outcome:
    """Start the cell's saga on a fresh fleet, arm its faults, and play it out."""
    fleet = TestFleet()
    tools = fleet.tools
    assert isinstance(tools, TripTools)
    saga_id = fleet.client().start("trip", cell.input, key=cell.id).saga_id
    tool = TRIP_TOOLS[(cell.step, cell.kind)]
    for fault, times, params in cell.rules:
        tools.fail_next(tool, fault, times, saga_id=saga_id, **params)
    if cell.reuse_key:
        key = fleet.state(saga_id).run(cell.step, FWD).operation_key
        tools[tool].execute({"saga_id": saga_id, "flight_id": "FL999",
                             "passenger_email": "eve@example.com"}, key)
    fleet.run_until_idle()
    fleet.advance(60)  # leases, backoffs and short lookups play out; commit horizons do not
    parked: tuple[list[SagaEvent], TripLedger | None] = ([], None)
    if _waits_out_a_horizon(fleet.state(saga_id), fleet.clock()):
        parked = (fleet.events(saga_id), tools.ledger(saga_id))
    fleet.advance(600)
    return Outcome(fleet.state(saga_id).status, fleet.events(saga_id), tools.ledger(saga_id),
                   crashed=bool(fleet.crashed), parked_events=parked[0],
                   parked_ledger=parked[1])


def _waits_out_a_horizon(state: SagaState, now: Any) -> bool:
    """A lookup scheduled far ahead: a non-deduping tool waiting out its commit horizon."""
    soon = now + timedelta(seconds=30)
    return any(run.status is RunStatus.RECONCILING and run.not_before is not None
               and run.not_before > soon
               for run in [*state.forward.values(), *state.compensation.values()])


# -- expectations (as in the real-server matrix) --------------------------------------------


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
    if cell.kind is FWD:
        _completed(out)
    else:
        _compensated(out)
        assert out.ledger.captures == 1 and out.ledger.refunded == AMOUNT


def _retried_after_timeout(out: Outcome, cell: Cell) -> None:
    assert [(u.attempt, u.reason) for u in out.of(cell, StepOutcomeUnknown)] == [(1, "timeout")]
    assert [r.result for r in out.of(cell, ReconciliationResult)] == ["absent"]
    assert [(s.attempt, s.via) for s in out.of(cell, StepSucceeded)] == [(2, "execute")]
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
    assert out.parked_ledger.itineraries_sent == 0
    parked = Outcome(out.status, out.parked_events, out.parked_ledger)
    assert len(parked.of(cell, StepStarted)) == 1
    (unknown,) = parked.of(cell, StepOutcomeUnknown)
    horizon_lookup = parked.of(cell, ReconciliationScheduled)[-1]
    assert horizon_lookup.not_before >= unknown.at + timedelta(seconds=120)
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


def check_before_receipt(out: Outcome, cell: Cell) -> None:
    # The worker died after the provider committed: one claim, its lease ran out, the
    # lookup found the committed effect, and nothing ran twice.
    assert out.crashed
    _settled(out, cell)
    claims = out.of(cell, StepStarted)
    if len(claims) == 1:
        _found_by_lookup(out, cell, "lease_expired")
    else:
        # A provider that dedupes may be claimed again at once with the same key.
        _one_operation_key(out, cell)


def check_business_rejection(out: Outcome, cell: Cell) -> None:
    _compensated(out)
    (failed,) = out.of(cell, StepFailed)
    assert failed.error_class is ErrorClass.BUSINESS_REJECTION
    (started,) = [e for e in out.events if isinstance(e, CompensationStarted)]
    assert started.failed_step == cell.step
    undone = {e.step_id for e in out.events if isinstance(e, StepSucceeded) and e.kind is COMP}
    done = {e.step_id for e in out.events if isinstance(e, StepSucceeded) and e.kind is FWD}
    assert cell.step not in done and undone == done  # exactly what had an effect is undone


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
def test_failure_matrix_cell_on_testfleet(cell_id: str) -> None:
    cell = CELLS[cell_id]
    CHECKS[cell.boundary](run_cell(cell), cell)
