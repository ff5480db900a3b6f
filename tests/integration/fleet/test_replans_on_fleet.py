"""Failure table row 4 on a real fleet ("the model replans the same action as a new step"):
a ``sagafleet worker`` process running the recording tools (``toolsets/replan_tools.py``:
every call is a row, nothing deduplicated by key) on real PostgreSQL and Redis.

A plan runs its first actions and waits at a gated payment; the agent sends a signed
``submit_plan`` revision over Celery that keeps the first action, drops the second and
changes the payment. The kept action reached its tool exactly once, the dropped one was
undone, the changed one ran with its new arguments, and the saga completed.
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
from signed_agent import agent_signer, bare_celery, send

from saga_core import AgentPlan, PlannedAction, RevisionRefused, action_step_id
from saga_core.contracts import SagaStatus, StepKind
from saga_core.events import PlanRevised, SagaEvent, StepStarted
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
        return list(self.fleet.repo.load(saga_id).events)

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


def test_a_replan_keeps_the_run_action_undoes_the_dropped_one_and_completes(
    replans: ReplanFleet, broker: str, wait_settled: Any, database: str,
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
    revision = signer.submit_plan(AgentPlan(actions=[OUT, PAY_SMALL]).model_dump(mode="json"),
                                  revises=saga_id, reason="the user found a cheaper fare")
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
    # and a revision of the finished saga is refused, naming why
    with pytest.raises(RevisionRefused, match="saga_terminal"):
        client.revise_plan(saga_id, AgentPlan(actions=[OUT]))
