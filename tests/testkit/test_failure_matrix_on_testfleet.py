"""The failure matrix (tests/failure_matrix_spec.py) on TestFleet.

The same cells and the same checks as on real servers — journal and the providers' books,
not only the state label — with the in-memory trip tools in place of the sandbox and the
test clock in place of waiting: each cell is one saga on its own fleet, run in a fraction
of a second. The "before_receipt" cells kill the worker with the kit's
``worker_crash_after_commit`` fault instead of a SIGKILL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from failure_matrix_spec import (
    CELLS,
    CHECKS,
    FWD,
    Cell,
    Outcome,
    recovered_after_lost_receipt,
    waits_out_a_horizon,
)
from kit_harness import TRIP_TOOLS
from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from saga_core.engine.events import SagaEvent
from sagafleet.testing import TestFleet, TripLedger, TripTools


@dataclass
class KitOutcome(Outcome):
    """A cell's outcome on TestFleet, and whether a worker crashed on the way."""

    crashed: bool = False


def run_cell(cell: Cell) -> KitOutcome:
    """Start the cell's saga on a fresh fleet, arm its faults, and play it out."""
    fleet = TestFleet()
    tools = fleet.tools
    assert isinstance(tools, TripTools)
    trip = BOUNCING_INPUT if cell.unwinds else TRIP_INPUT
    saga_id = fleet.client().start("trip", trip, key=cell.id).saga_id
    tool = TRIP_TOOLS[(cell.step, cell.kind)]
    for fault, times, params in cell.faults:
        tools.fail_next(tool, fault, times, saga_id=saga_id, **params)
    if cell.reuse_key:
        key = fleet.state(saga_id).run(cell.step, FWD).operation_key
        tools[tool].execute({"saga_id": saga_id, "flight_id": "FL999",
                             "passenger_email": "eve@example.com"}, key)
    fleet.run_until_idle()
    fleet.advance(60)  # leases, backoffs and short lookups play out; commit horizons do not
    parked: tuple[list[SagaEvent], TripLedger | None] = ([], None)
    if waits_out_a_horizon(fleet.state(saga_id), fleet.clock()):
        parked = (fleet.events(saga_id), tools.ledger(saga_id))
    fleet.advance(600)
    return KitOutcome(fleet.state(saga_id).status, fleet.events(saga_id), tools.ledger(saga_id),
                      amount=trip["amount"], parked_events=parked[0], parked_ledger=parked[1],
                      crashed=bool(fleet.crashed))


def check_before_receipt(out: KitOutcome, cell: Cell) -> None:
    # The worker died after the provider committed: one claim, its lease ran out, the
    # lookup found the committed effect, and nothing ran twice.
    assert out.crashed
    recovered_after_lost_receipt(out, cell)


KIT_CHECKS: dict[str, Callable[[KitOutcome, Cell], None]] = {
    **CHECKS, "before_receipt": check_before_receipt,
}


@pytest.mark.parametrize("cell_id", list(CELLS))
def test_failure_matrix_cell_on_testfleet(cell_id: str) -> None:
    cell = CELLS[cell_id]
    KIT_CHECKS[cell.boundary](run_cell(cell), cell)
