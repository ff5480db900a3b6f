"""The failure matrix's one specification: its cells, and the checks that read an outcome.

Every trip step and every compensation × every failure boundary, as data (which operation,
where it fails, which fault to arm), and what each cell must end as — read from the journal
and the providers' books (``TripLedger``), not only the state label. Two worlds run it:
real PostgreSQL + Redis + worker processes + the sandbox providers
(tests/integration/reliability/test_failure_matrix.py), and the in-memory TestFleet
(tests/testkit/test_failure_matrix_on_testfleet.py); each only arms the faults and plays
the cells out its own way, and adds what only it can see.

Boundaries (columns):

* ``before_dispatch``  — the request never reached the provider, the caller timed out
  (``timeout_before_dispatch``): reconcile → absent → retry with the same key;
* ``during_dispatch``  — the provider failed mid-request, nothing committed
  (``fail_before_commit``, 503): a transient failure, retried with the same key;
* ``after_commit``     — the provider committed, the response was lost
  (``commit_then_timeout``): reconcile → found, never dispatched twice;
* ``before_receipt``   — the tool returned but the worker died before persisting the receipt
  (``worker_crash_after_commit``: a SIGKILL there on real workers): lease expires →
  reconcile → found;
* ``business_rejection`` (forward) and ``compensation_failure`` / ``_permanent``,
  ``target_changed`` (compensation).

The pivot's compensation (``email.send_correction``) is unreachable in the trip saga: once
the pivot succeeded nothing is compensated, so there is no compensation row for it.

Importable as ``failure_matrix_spec`` from every test folder: pytest puts ``tests/`` on
``sys.path`` for tests/conftest.py, as it puts each harness's folder there for its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from saga_core.contracts import ErrorClass, SagaStatus, StepKind
from saga_core.engine.events import (
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
from saga_core.engine.state import RunStatus, SagaState
from sagafleet.example_sagas.ledger import TripLedger

FWD, COMP = StepKind.FORWARD, StepKind.COMPENSATION
FORWARD_STEPS = ("hold_flight", "hold_hotel", "capture_payment", "send_itinerary")
COMPENSATED_STEPS = ("hold_flight", "hold_hotel", "capture_payment")

# The effect commits, then the worker dies before recording it. The test kit arms it as a
# fault of its tools; real workers are frozen right after the commit and SIGKILLed instead.
WORKER_CRASH_AFTER_COMMIT = "worker_crash_after_commit"

FaultRule = tuple[str, int | None, dict[str, Any]]  # (fault, times (None: always), params)


@dataclass(frozen=True)
class Cell:
    """One saga of the matrix: a step's operation, where it fails, and how."""

    step: str
    kind: StepKind
    boundary: str
    faults: tuple[FaultRule, ...] = ()
    # Before the saga runs, the step's operation key is used once with another payload.
    reuse_key: bool = False

    @property
    def id(self) -> str:
        return f"{self.step}.{self.kind.value}.{self.boundary}"

    @property
    def unwinds(self) -> bool:
        """A compensation only runs when the saga unwinds: the pivot's recipient bounces."""
        return self.kind is COMP


def _delivery_cells(step: str, kind: StepKind) -> list[Cell]:
    """The boundaries every operation has, forward or compensation: where delivery breaks."""
    return [
        Cell(step, kind, "before_dispatch", (("timeout_before_dispatch", 1, {}),)),
        Cell(step, kind, "during_dispatch", (("fail_before_commit", 1, {}),)),
        Cell(step, kind, "after_commit", (("commit_then_timeout", 1, {}),)),
        Cell(step, kind, "before_receipt", ((WORKER_CRASH_AFTER_COMMIT, 1, {}),)),
    ]


def _cells() -> list[Cell]:
    cells: list[Cell] = []
    for step in FORWARD_STEPS:
        cells += [
            *_delivery_cells(step, FWD),
            Cell(step, FWD, "business_rejection", (("business_rejection", 1, {}),)),
        ]
    for step in COMPENSATED_STEPS:
        cells += [
            *_delivery_cells(step, COMP),
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
        # (The provider refuses here. The engine's own refusal, before any call, of a later
        # attempt whose request changed is no tool fault to arm: tests/unit/saga_core/
        # test_key_reuse.py, tests/testkit/test_key_reuse_on_testfleet.py and
        # tests/integration/fleet/test_key_reuse_on_fleet.py play it.)
        Cell("hold_flight", FWD, "key_reused_with_other_payload", reuse_key=True),
    ]
    return cells


CELLS = {cell.id: cell for cell in _cells()}


@dataclass
class Outcome:
    """What one cell ended as: the state, the journal and the providers' books."""

    status: SagaStatus
    events: list[SagaEvent]
    ledger: TripLedger
    amount: int  # what the cell's saga was asked to charge
    # For a saga left waiting out a commit horizon: its journal and ledger at that point.
    parked_events: list[SagaEvent] = field(default_factory=list)
    parked_ledger: TripLedger | None = None

    def of(self, cell: Cell, *types: type) -> list[Any]:
        """The cell's step events of the given types, for its operation (step and kind)."""
        return [e for e in self.events if isinstance(e, types)
                and getattr(e, "step_id", None) == cell.step and e.kind is cell.kind]


def waits_out_a_horizon(state: SagaState, now: datetime) -> bool:
    """A lookup scheduled far ahead: a non-deduping tool waiting out its commit horizon."""
    soon = now + timedelta(seconds=30)
    return any(run.status is RunStatus.RECONCILING and run.not_before is not None
               and run.not_before > soon
               for run in [*state.forward.values(), *state.compensation.values()])


# -- expectations --------------------------------------------------------------------------


def _one_operation_key(out: Outcome, cell: Cell) -> None:
    keys = {e.operation_key for e in out.of(cell, StepStarted)}
    assert len(keys) == 1, f"attempts used several operation keys: {keys}"


def _completed(out: Outcome) -> None:
    assert out.status is SagaStatus.COMPLETED
    assert out.ledger.is_complete_trip and not out.ledger.duplicates
    assert out.ledger.net_charge == out.amount and out.ledger.itineraries_sent == 1


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
        assert out.ledger.captures == 1 and out.ledger.refunded == out.amount


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
    """Reconciled absent, retried once with the same key; a non-deduping tool waits first."""
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
    parked = Outcome(out.status, out.parked_events, out.parked_ledger, out.amount)
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
    """A transient failure, retried once with the same key."""
    _settled(out, cell)
    _retried_after_transient(out, cell)


def check_after_commit(out: Outcome, cell: Cell) -> None:
    """The lost response's effect is found by lookup, never dispatched twice."""
    _settled(out, cell)
    _found_by_lookup(out, cell, "timeout")


def recovered_after_lost_receipt(out: Outcome, cell: Cell) -> None:
    """The journal side of ``before_receipt``; each world checks its own worker died."""
    _settled(out, cell)  # one effect in the ledger, whatever path recovery took
    if len(out.of(cell, StepStarted)) == 1:
        # The dead worker's lease expired, the lookup found the committed effect, no re-run.
        _found_by_lookup(out, cell, "lease_expired")
    else:
        # The attempt was claimed again (directly, since this provider dedupes by key, or
        # after a lease_expired lookup) with the same key, and the dedupe kept one effect.
        _one_operation_key(out, cell)
        reasons = [u.reason for u in out.of(cell, StepOutcomeUnknown)]
        assert set(reasons) <= {"lease_expired"}, reasons


def check_business_rejection(out: Outcome, cell: Cell) -> None:
    """Exactly the steps that had an effect are undone."""
    _compensated(out)
    (failed,) = out.of(cell, StepFailed)
    assert failed.error_class is ErrorClass.BUSINESS_REJECTION
    (started,) = [e for e in out.events if isinstance(e, CompensationStarted)]
    assert started.failed_step == cell.step
    undone = {e.step_id for e in out.events if isinstance(e, StepSucceeded) and e.kind is COMP}
    done = {e.step_id for e in out.events if isinstance(e, StepSucceeded) and e.kind is FWD}
    assert cell.step not in done and undone == done  # exactly what had an effect is undone
    if cell.step in COMPENSATED_STEPS:
        assert out.ledger.captures == 0  # rejected at or before the charge: never charged


def check_compensation_failure(out: Outcome, cell: Cell) -> None:
    """A transient compensation failure, retried once with the same key."""
    _settled(out, cell)
    _retried_after_transient(out, cell)


def check_compensation_failure_permanent(out: Outcome, cell: Cell) -> None:
    """A compensation that can never succeed escalates, its effect left in place once."""
    manual = _escalated_on(out, cell, "permanent failure")
    assert manual.evidence.forward_receipt is not None
    assert "mark_compensated" in manual.evidence.alternatives
    _left_undone(out, cell)


def check_target_changed(out: Outcome, cell: Cell) -> None:
    """A compensation whose target changed escalates; the refund has no precondition."""
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
        assert ledger.net_charge == out.amount
        assert ledger.active_flight_holds == 1 and ledger.active_hotel_holds == 1
    else:
        assert ledger.net_charge == 0
        held = ledger.active_flight_holds if cell.step == "hold_flight" else \
            ledger.active_hotel_holds
        assert held == 1


def check_after_commit_lookup_unavailable(out: Outcome, cell: Cell) -> None:
    """An unproven charge escalates; it is neither dispatched again nor undone."""
    manual = _escalated_on(out, cell, "unproven")
    results = [r.result for r in out.of(cell, ReconciliationResult)]
    assert results and set(results) == {"unknown"}
    assert len(out.of(cell, StepStarted)) == 1, "an unproven charge was dispatched again"
    # The charge did happen exactly once; nothing was undone while its outcome is unknown.
    assert out.ledger.captures == 1 and out.ledger.refunded == 0
    assert out.ledger.active_flight_holds == 1 and out.ledger.active_hotel_holds == 1
    assert manual.evidence.details["status"] in ("unknown", "reconciling")


def check_after_commit_slow_visibility(out: Outcome, cell: Cell) -> None:
    """A slow lookup's "absent" is retried with the same key, replayed: one hold."""
    _completed(out)
    assert out.ledger.hotel_holds == 1
    assert [r.result for r in out.of(cell, ReconciliationResult)] == ["absent"]
    assert [(s.attempt, s.via) for s in out.of(cell, StepSucceeded)] == [(2, "execute")]
    _one_operation_key(out, cell)


def check_key_reused_with_other_payload(out: Outcome, cell: Cell) -> None:
    """A key already used with another payload is refused as permanent; no second hold."""
    _escalated_on(out, cell, "permanent failure")
    (failed,) = out.of(cell, StepFailed)
    assert failed.error_class is ErrorClass.PERMANENT and "different request" in failed.message
    assert out.ledger.flight_holds == 1  # only the earlier request's hold; no second one
    assert out.ledger.captures == 0


# The check of every boundary both worlds see alike; each world adds "before_receipt".
CHECKS: dict[str, Callable[[Outcome, Cell], None]] = {
    name.removeprefix("check_"): fn for name, fn in globals().items()
    if name.startswith("check_") and callable(fn)
}
