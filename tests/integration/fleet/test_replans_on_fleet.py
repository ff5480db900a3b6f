"""Failure table row 4 on a real fleet ("the model replans the same action as a new step"):
a ``sagafleet worker`` process running the recording tools (``toolsets/replan_tools.py``:
every call is a row, nothing deduplicated by key) on real PostgreSQL and Redis.

A plan runs its first actions and waits at a gated payment; the agent sends a signed
``submit_plan`` revision over Celery that keeps the first action, drops the second and
changes the payment. The kept action reached its tool exactly once, the dropped one was
undone, the changed one ran with its new arguments, and the saga completed.

Corrections on the same fleet: the pivot (a notice) succeeded and the step after it fails
for good; the operator queue's evidence offers the pivot's declared correction with its
residual impact, an operator chooses it with ``sagafleet resolve ... run_correction``, it
runs as the pivot's compensation under its own key, and the saga ends
COMMITTED_WITH_REPAIR; a correction that fails leaves the saga paused with the reason.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_harness import QUEUE_WAIT_S, worker_env
from principal_support import authenticated, issue_token, person
from read_model_support import project_all
from signed_agent import agent_signer, bare_celery, send

from projections import ProjectionContext
from projections.audit import audit
from projections.queue import operator_queue
from saga_core import AgentPlan, PlannedAction, RevisionRefused, action_step_id
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import OperatorAction, PlanRevised, SagaEvent, StepStarted
from saga_core.keys import operation_key
from sagafleet.cli import main
from sagafleet.exit_codes import ExitCode
from sagafleet.processes import spawn_sagafleet, stop_processes
from workers.fleet import Fleet, FleetConfig

TOOLSETS = Path(__file__).parent / "toolsets"
sys.path.insert(0, str(TOOLSETS))

import replan_tools  # noqa: E402  (found through TOOLSETS, as the worker finds it)

F, C = StepKind.FORWARD, StepKind.COMPENSATION
OUT = PlannedAction(tool="trips.book", args={"leg": "outbound LH1"})
HOTEL = PlannedAction(tool="trips.book", args={"leg": "hotel H1"})
PAY_BIG = PlannedAction(tool="trips.pay", args={"amount": 500})  # over 100: asks a person
PAY_SMALL = PlannedAction(tool="trips.pay", args={"amount": 80})
LEASE_S = 30.0


class ReplanFleet:
    """The test's fleet object on the recording tools, and one worker process."""

    def __init__(self, database: str, broker: str, log_dir: Path) -> None:
        replan_tools.install(database)
        self.database = database
        self.fleet = Fleet(FleetConfig(database_url=database, broker_url=broker,
                                       lease_s=LEASE_S, queue_wait_s=QUEUE_WAIT_S,
                                       worker_id="test-process"), replan_tools.tool_set())
        env = {**worker_env(database, broker, lease_s=LEASE_S),
               "SAGAFLEET_TOOLS": "replan_tools:tool_set",
               "PYTHONPATH": os.pathsep.join([str(TOOLSETS), os.environ.get("PYTHONPATH", "")])}
        self.worker = spawn_sagafleet(["worker", "--concurrency", "2"], env,
                                      log_dir / "worker.log")

    def events(self, saga_id: str) -> list[SagaEvent]:
        return list(self.fleet.repo.load_history(saga_id).events)

    def close(self) -> None:
        stop_processes([self.worker])
        self.fleet.close()


@pytest.fixture
def replans(database: str, broker: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[ReplanFleet]:
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", database)
    built = ReplanFleet(database, broker, tmp_path)
    yield built
    built.close()


def _wait(fleet: ReplanFleet, saga_id: str, done: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done(fleet.fleet.repo.load(saga_id)):
        assert time.monotonic() < deadline, f"saga {saga_id} never got there"
        time.sleep(0.1)


@pytest.mark.parametrize("naming", ["revises", "revises_key"])
def test_a_replan_keeps_the_run_action_undoes_the_dropped_one_and_completes(
    replans: ReplanFleet, broker: str, wait_settled: Any, database: str, naming: str,
) -> None:
    # given a plan saga that booked its outbound leg and its hotel, and waits at a payment
    # over the approval limit
    client = replans.fleet.client()
    plan = client.submit_plan(AgentPlan(actions=[OUT, HOTEL, PAY_BIG]))
    saga_id = client.start(plan.name, {}, key="agent-request-7").saga_id
    _wait(replans, saga_id, lambda loaded: loaded.state.run(
        action_step_id(PAY_BIG), F).status == "awaiting_approval")
    assert Counter(tool for tool, _, _ in replan_tools.calls(database)) == {"trips.book": 2}
    out_key = replans.fleet.repo.load(saga_id).state.run(action_step_id(OUT), F).operation_key

    # when the agent replans over Celery: keep the outbound leg, drop the hotel, pay less
    signer = agent_signer(replans.fleet, "default", "planner")
    # (naming the saga by its id, or by the agent request it was started for)
    target = {"revises": saga_id} if naming == "revises" else {"revises_key": "agent-request-7"}
    revision = signer.submit_plan(AgentPlan(actions=[OUT, PAY_SMALL]).model_dump(mode="json"),
                                  reason="the user found a cheaper fare", **target)
    agent = bare_celery(broker)
    task_id = send(agent, revision)
    send(agent, revision, task_id)  # the broker redelivers it: nothing more is recorded

    # then the saga completes as one saga, one plan revision recorded
    assert wait_settled(saga_id) is SagaStatus.COMPLETED
    events = replans.events(saga_id)
    (revised,) = [e for e in events if isinstance(e, PlanRevised)]
    assert (revised.kept, revised.dropped, revised.removed, revised.added) == (
        [action_step_id(OUT)], [action_step_id(HOTEL)], [action_step_id(PAY_BIG)],
        [action_step_id(PAY_SMALL)])
    assert revised.actor == "planner" and revised.reason == "the user found a cheaper fare"
    # and the kept action reached its tool exactly once, under its one key
    calls = replan_tools.calls(database)
    books = [(key, args["leg"]) for tool, key, args in calls if tool == "trips.book"]
    assert books.count((out_key, "outbound LH1")) == 1
    assert [e.operation_key for e in events if isinstance(e, StepStarted)
            and e.step_id == action_step_id(OUT)] == [out_key]
    # and the dropped hotel was undone, the big payment never made, the small one made
    hotel = replans.fleet.repo.load(saga_id).state.run(action_step_id(HOTEL), F)
    assert [args["booking"] for tool, _, args in calls if tool == "trips.cancel"] == [
        hotel.operation_key]
    assert [args["amount"] for tool, _, args in calls if tool == "trips.pay"] == [80]
    assert Counter(tool for tool, _, _ in calls) == {
        "trips.book": 2, "trips.cancel": 1, "trips.pay": 1}
    # and the read side folds the revision: the audit shows it, the steps are the new plan's
    with ProjectionContext.connect(database) as ctx:
        project_all(ctx)
        report = audit(ctx, saga_id, tenant="default")
    assert "PlanRevised" in [e.type for e in report.timeline]
    # and a revision of the finished saga is refused, naming why
    with pytest.raises(RevisionRefused, match="saga_terminal"):
        client.revise_plan(saga_id, AgentPlan(actions=[OUT]))


def _order(replans: ReplanFleet, key: str, to: str) -> str:
    admin = replans.fleet.client_for(authenticated(replans.fleet, "admin", ["admin"]))
    admin.register_definition(replan_tools.order_definition())
    return replans.fleet.client().start("order", {"to": to}, key=key).saga_id


def test_the_pivots_correction_is_offered_chosen_on_the_command_line_and_repairs(
    replans: ReplanFleet, wait_settled: Any, database: str, broker: str,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # given an order whose notice (the pivot) went out and whose shipping fails for good
    saga_id = _order(replans, "order-1", "ada@example.com")
    assert wait_settled(saga_id) is SagaStatus.MANUAL_INTERVENTION
    # then the operator queue's evidence offers the correction with its residual impact
    with ProjectionContext.connect(database) as ctx:
        project_all(ctx)
        (entry,) = operator_queue(ctx, tenant="default")
    assert entry.step_id == "ship" and "run_correction" in entry.evidence["alternatives"]
    offer = entry.evidence["details"]["correction"]
    assert offer["tool"] == "trips.notify_correction@1" and offer["step"] == "notify"
    assert any("notify's own effect" in s for s in offer["does_not_undo"])
    assert any("book" in s for s in offer["does_not_undo"])

    # when an operator chooses it through the command line
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", database)
    monkeypatch.setenv("SAGAFLEET_BROKER_URL", broker)
    monkeypatch.setenv("SAGAFLEET_TOOLS", "replan_tools:tool_set")
    monkeypatch.setenv("SAGAFLEET_TOKEN", issue_token(database, "ada", ["operator"]))
    capsys.readouterr()
    assert main(["resolve", saga_id, "run_correction", "--reason", "tell the customer",
                 "--json"]) == ExitCode.OK

    # then the correction ran once, as the pivot's compensation under its own key
    assert wait_settled(saga_id) is SagaStatus.COMMITTED_WITH_REPAIR
    events = replans.events(saga_id)
    (chosen,) = [e for e in events if isinstance(e, OperatorAction)]
    assert (chosen.action, chosen.step_id, chosen.kind, chosen.actor) == (
        "run_correction", "notify", C, "ada")
    corrections = [(key, args) for tool, key, args in replan_tools.calls(database)
                   if tool == "trips.notify_correction"]
    assert [key for key, _ in corrections] == [operation_key(saga_id, "notify", C, 1)]
    notify = replans.fleet.repo.load(saga_id).state.run("notify", F)
    assert corrections[0][1]["booking"] == notify.receipt.resource_id  # type: ignore[union-attr]
    # and nothing before the pivot was undone
    assert "trips.cancel" not in [tool for tool, _, _ in replan_tools.calls(database)]


def test_a_correction_that_fails_leaves_the_saga_paused_with_the_reason(
    replans: ReplanFleet, wait_settled: Any,
) -> None:
    # given an order whose notice went to an address whose corrections are refused
    saga_id = _order(replans, "order-2", "broken@example.com")
    assert wait_settled(saga_id) is SagaStatus.MANUAL_INTERVENTION
    # when an operator chooses the correction
    person(replans.fleet, "ops", ["operator"]).resolve(saga_id, "run_correction",
                                                       reason="try to correct it")
    # then the saga pauses again, naming the failed correction
    assert wait_settled(saga_id, until=lambda s: s is SagaStatus.MANUAL_INTERVENTION
                        and replans.fleet.repo.load(saga_id).state.correcting is not None
                        and replans.fleet.repo.load(saga_id).state.escalation is not None
                        ) is SagaStatus.MANUAL_INTERVENTION
    state = replans.fleet.repo.load(saga_id).state
    assert state.escalation is not None
    assert state.escalation.reason.startswith("the correction of notify failed")
    assert "refused the correction" in state.escalation.reason
