"""Postconditions, step timeouts, compensation deadlines and forward preconditions on a real
fleet: a ``sagafleet worker`` process running the payout tools (``toolsets/payout_tools.py``)
on real PostgreSQL and Redis, the test process sweeping as a sweeper process would.

A call that must hang waits on a row lock the test holds (no timing window); the declared
times are short (1-2 s) and each test only waits for the saga to settle.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fleet_harness import QUEUE_WAIT_S, worker_env
from principal_support import authenticated, person
from read_model_support import project_all

from projections import ProjectionContext
from projections.audit import audit
from projections.queue import operator_queue
from saga_core import SagaDefinition
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import (
    CompensationStarted,
    DeadlineMissed,
    ManualInterventionRequired,
    PostconditionNotObserved,
    PostconditionObserved,
    ReconciliationResult,
    SagaEvent,
    StepFailed,
)
from saga_core.engine.state import RunStatus
from sagafleet.processes import spawn_sagafleet, stop_processes
from workers.fleet import Fleet, FleetConfig

TOOLSETS = Path(__file__).parent / "toolsets"
sys.path.insert(0, str(TOOLSETS))

import payout_tools  # noqa: E402  (found through TOOLSETS, as the worker finds it)

F, C = StepKind.FORWARD, StepKind.COMPENSATION
INPUT = {"source": "acc-a", "destination": "acc-b", "amount": 500}
# Longer than any declared time here: what fires is the declared time, not the lease.
WORKER_LEASE_S = 120.0


class PayoutFleet:
    """The test's fleet object on the payout tools, one definition, one worker process."""

    def __init__(self, database: str, broker: str, log_dir: Path,
                 definition: SagaDefinition) -> None:
        self.database = database
        self.fleet = Fleet(FleetConfig(database_url=database, broker_url=broker,
                                       lease_s=WORKER_LEASE_S, queue_wait_s=QUEUE_WAIT_S,
                                       worker_id="test-process"), payout_tools.tool_set())
        admin = self.fleet.client_for(authenticated(self.fleet, "admin", ["admin"]))
        admin.register_definition(definition)
        env = {**worker_env(database, broker, lease_s=WORKER_LEASE_S),
               "SAGAFLEET_TOOLS": "payout_tools:tool_set",
               "PYTHONPATH": os.pathsep.join([str(TOOLSETS), os.environ.get("PYTHONPATH", "")])}
        # Threads, so a call hanging at a gate does not stop the saga's other work.
        self.worker = spawn_sagafleet(["worker", "--concurrency", "4"], env,
                                      log_dir / "worker.log")
        self.version = definition.version
        self.definition = definition

    def start(self, key: str, **changes: Any) -> str:
        return self.fleet.client().start("payout", {**INPUT, **changes}, key=key,
                                         version=self.version).saga_id

    def events(self, saga_id: str) -> list[SagaEvent]:
        return list(self.fleet.repo.load_history(saga_id).events)

    def close(self) -> None:
        stop_processes([self.worker])
        self.fleet.close()


@pytest.fixture
def payout(database: str, broker: str, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Build a PayoutFleet for a definition; every one built is closed at the end."""
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", database)  # the test process's own tools
    built: list[PayoutFleet] = []

    def build(definition: SagaDefinition, balances: dict[str, int] | None = None, *,
              unsettled: tuple[str, ...] = (), gated: tuple[str, ...] = ()) -> PayoutFleet:
        payout_tools.install(database, balances or {"acc-a": 1_000, "acc-b": 0},
                             unsettled=unsettled, gated=gated)
        built.append(PayoutFleet(database, broker, tmp_path, definition))
        return built[-1]

    yield build
    for fleet in built:
        fleet.close()


def _of(events: list[SagaEvent], kind: type[SagaEvent]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_a_postcondition_observed_advances_the_payout(payout, wait_settled, database):
    # given a payout into an account that settles
    fleet = payout(payout_tools.definition())
    saga_id = fleet.start("observed")
    # when the worker runs it
    assert wait_settled(saga_id) is SagaStatus.COMPLETED
    # then the credit advanced only once a lookup by key found it settled
    events = fleet.events(saga_id)
    (observed,) = _of(events, PostconditionObserved)
    assert (observed.step_id, observed.how) == ("credit", "lookup")
    assert observed.receipt.status == "settled"
    lookup = next(e for e in _of(events, ReconciliationResult) if e.step_id == "credit")
    assert events.index(lookup) < events.index(observed)
    assert payout_tools.ops(database) == [("accounts.debit", "acc-a", 500, "posted"),
                                          ("accounts.credit", "acc-b", 500, "settled")]


def test_a_postcondition_not_observed_is_reconciled_then_escalated_never_advanced(
    payout, wait_settled, database,
):
    # given a payout into an account whose transfers stay pending
    fleet = payout(payout_tools.definition(), unsettled=("acc-b",))
    saga_id = fleet.start("unobserved")
    # when the worker runs it past the postcondition's horizon (2 s)
    assert wait_settled(saga_id) is SagaStatus.MANUAL_INTERVENTION
    # then the credit was looked up by key, then the saga paused with the reason
    events = fleet.events(saga_id)
    lookups = [e for e in _of(events, ReconciliationResult) if e.step_id == "credit"]
    assert lookups and all(e.receipt.status == "pending" for e in lookups)
    (missed,) = _of(events, PostconditionNotObserved)
    assert "not observed within its horizon" in missed.reason
    (manual,) = _of(events, ManualInterventionRequired)
    assert manual.step_id == "credit" and manual.reason == missed.reason
    assert manual.evidence.details["invariant"].startswith("Money leaves the source account")
    # and it was never advanced: no success of the credit, nothing undone, still in doubt
    state = fleet.fleet.repo.load(saga_id).state
    assert state.run("credit", F).status is RunStatus.VERIFYING
    assert _of(events, PostconditionObserved) == [] and _of(events, CompensationStarted) == []
    view = fleet.fleet.client().status(saga_id)
    assert view.escalation is not None and "not observed" in view.escalation["reason"]
    # and the operator queue's evidence and the audit state the business invariant
    with ProjectionContext.connect(database) as ctx:
        project_all(ctx)
        (entry,) = operator_queue(ctx, tenant="default")
        assert entry.step_id == "credit" and "not observed" in entry.reason
        assert entry.evidence["details"]["invariant"] == fleet.definition.invariant
        report = audit(ctx, saga_id, tenant="default")
        assert report.invariant == fleet.definition.invariant
        assert "PostconditionNotObserved" in [e.type for e in report.timeline]

    # when the bank settles it after all and a person resumes the saga
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE test_payout_ops SET status = 'settled' "
                     "WHERE tool = 'accounts.credit'")
    operator = person(fleet.fleet, "ops", ["operator"])
    operator.resolve(saga_id, "resume", step_id="credit", reason="bank settled it late")
    # then a lookup observes it and the payout ends, honestly, as repaired
    assert wait_settled(saga_id) is SagaStatus.COMMITTED_WITH_REPAIR
    assert len(_of(fleet.events(saga_id), PostconditionObserved)) == 1


def test_a_debit_past_its_timeout_follows_policy_escalate(payout, wait_settled, database):
    # given a debit (timeout 1 s, on_timeout: escalate) whose bank call hangs
    fleet = payout(payout_tools.definition(3, debit_timeout_s=1),
                   gated=("accounts.debit",))
    gate = payout_tools.hold_gate(database, "accounts.debit")
    try:
        saga_id = fleet.start("debit-hangs")
        # when its timeout passes (the sweeper finds it due)
        assert wait_settled(saga_id) is SagaStatus.MANUAL_INTERVENTION
    finally:
        payout_tools.let_go(gate, "accounts.debit")
    # then the miss is an event with its reason and policy, and a person is asked
    events = fleet.events(saga_id)
    (missed,) = _of(events, DeadlineMissed)
    assert (missed.step_id, missed.deadline_kind, missed.policy) == (
        "debit", "step_timeout", "escalate")
    assert "ran past its timeout of 1 s" in missed.reason
    (manual,) = _of(events, ManualInterventionRequired)
    assert manual.step_id == "debit" and "timeout" in manual.reason
    assert payout_tools.ops(database) == []  # the hanging call committed nothing


def test_a_credit_past_its_timeout_follows_policy_compensate(payout, wait_settled, database):
    # given a credit (timeout 1 s, on_timeout: compensate) whose bank call hangs
    fleet = payout(payout_tools.definition(4, credit_timeout_s=1),
                   gated=("accounts.credit",))
    gate = payout_tools.hold_gate(database, "accounts.credit")
    try:
        saga_id = fleet.start("credit-hangs")
        # when its timeout passes
        assert wait_settled(saga_id) is SagaStatus.COMPENSATED
    finally:
        payout_tools.let_go(gate, "accounts.credit")
    # then the miss was recorded, compensation began for it, and the debit was refunded
    events = fleet.events(saga_id)
    (missed,) = _of(events, DeadlineMissed)
    assert (missed.step_id, missed.policy) == ("credit", "compensate")
    (begun,) = _of(events, CompensationStarted)
    assert begun.failed_step == "credit" and "timeout" in begun.reason
    # (the credit was looked up first: nothing found past its commit horizon, nothing undone)
    assert [e.result for e in _of(events, ReconciliationResult) if e.step_id == "credit"][-1] \
        == "absent"
    assert [op[0] for op in payout_tools.ops(database)] == ["accounts.debit",
                                                            "accounts.refund"]


def test_a_refund_past_its_deadline_escalates_with_the_reason(payout, wait_settled, database):
    # given a payout whose credit is refused (no such account) and whose refund hangs
    fleet = payout(payout_tools.definition(5, refund_deadline_s=1),
                   {"acc-a": 1_000}, gated=("accounts.refund",))
    gate = payout_tools.hold_gate(database, "accounts.refund")
    try:
        saga_id = fleet.start("refund-late", destination="acc-closed")
        # when the refund's deadline (1 s after compensation began) passes
        assert wait_settled(saga_id) is SagaStatus.MANUAL_INTERVENTION
    finally:
        payout_tools.let_go(gate, "accounts.refund")
    # then the miss is an event with the reason, and the escalation is about the refund
    events = fleet.events(saga_id)
    assert _of(events, CompensationStarted)
    (missed,) = _of(events, DeadlineMissed)
    assert (missed.step_id, missed.kind, missed.deadline_kind) == (
        "debit", C, "compensation_deadline")
    assert "not done by its deadline" in missed.reason
    (manual,) = _of(events, ManualInterventionRequired)
    assert (manual.step_id, manual.kind) == ("debit", C)
    assert "not done by its deadline" in manual.reason


def test_a_failed_forward_precondition_follows_policy_compensate(
    payout, wait_settled, database,
):
    # given a source account whose balance does not cover the amount
    fleet = payout(payout_tools.definition(), {"acc-a": 100, "acc-b": 0})
    saga_id = fleet.start("too-poor")
    # when the worker runs it
    assert wait_settled(saga_id) is SagaStatus.COMPENSATED
    # then the bank refused the debit by its precondition, the refusal is an event with the
    # reason, and the saga compensated as declared: nothing moved
    events = fleet.events(saga_id)
    (failed,) = _of(events, StepFailed)
    assert failed.step_id == "debit" and failed.error_class == "PreconditionFailed"
    assert "balance of acc-a is 100, below 500" in failed.message
    (begun,) = _of(events, CompensationStarted)
    assert "precondition of debit failed" in begun.reason and "compensate" in begun.reason
    assert payout_tools.ops(database) == []
