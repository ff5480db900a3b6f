"""Recovery rows of the failure matrix that need their own fleet: redelivery of every
message, an approval that expires while the fleet is down, and a saga resumed by processes
that never saw its definition object (recovery from the log alone)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import timedelta

import psycopg
import pytest
from celery import Celery
from fleet_harness import (
    AfterCommitFreeze,
    SandboxFleet,
    drive,
    events_of,
    settle,
    shifted_fleet,
    worker_env,
)
from principal_support import issue_token, person
from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from application.messages import StepCommand
from application.orchestrator import commands_due
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import (
    ApprovalGranted,
    ApprovalRequested,
    ReconciliationResult,
    ReconciliationScheduled,
    SagaStarted,
    StepScheduled,
    StepStarted,
    StepSucceeded,
)
from saga_core.errors import ApprovalExpired
from sagafleet.sandbox import ledger_for_saga
from workers.fleet import Fleet, FleetConfig
from workers.sweeper import Sweeper


def _scheduled_commands(fleet: Fleet, saga_id: str) -> list[StepCommand]:
    """Every step command the saga's log ever asked for (what the broker ever carried)."""
    return [StepCommand(saga_id=saga_id, step_id=e.step_id, kind=e.kind, attempt=e.attempt)
            for e in events_of(fleet, saga_id)
            if isinstance(e, StepScheduled | ReconciliationScheduled)]


@pytest.mark.parametrize("trip", [TRIP_INPUT, BOUNCING_INPUT], ids=["completes", "compensates"])
def test_every_message_delivered_twice_and_every_old_one_replayed_has_one_effect(fleet, trip):
    # given a saga driven message by message (this process is the worker, the log is real)
    saga = fleet.client().start("trip", trip, key="redeliver")
    pending = commands_due(events_of(fleet, saga.saga_id), saga.saga_id, fleet.clock())
    delivered: list[StepCommand] = []
    verdicts: Counter[str] = Counter()
    while pending:
        command = pending.pop(0)
        # when every message arrives twice, and every message seen so far arrives once more
        first = fleet.executor.handle(command)
        duplicate = fleet.executor.handle(command)
        stale = [fleet.executor.handle(old) for old in delivered]
        delivered.append(command)
        # then only the first copy of a message does anything
        assert duplicate.verdict == "dropped", duplicate.reason
        assert all(o.verdict == "dropped" for o in stale), [o.reason for o in stale]
        verdicts[first.verdict] += 1
        pending += list(first.follow_ups)
    expected = SagaStatus.COMPLETED if trip is TRIP_INPUT else SagaStatus.COMPENSATED
    assert fleet.repo.load(saga.saga_id).state.status is expected
    # and the ledgers hold one effect per operation; the journal one claim per operation
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert not ledger.duplicates
    assert ledger.is_complete_trip if trip is TRIP_INPUT else ledger.is_unwound
    claims = Counter((e.step_id, e.kind) for e in events_of(fleet, saga.saga_id)
                     if isinstance(e, StepStarted))
    assert set(claims.values()) == {1}
    assert verdicts["executed"] == len(claims)


def test_replaying_every_old_message_through_the_broker_changes_nothing(
    fleet, broker, database, workers
):
    # given a completed and a compensated saga on one real worker
    workers.start(1)
    client = fleet.client()
    sagas = [client.start("trip", TRIP_INPUT, key="replay-ok").saga_id,
             client.start("trip", BOUNCING_INPUT, key="replay-unwound").saga_id]
    settle(fleet, sagas)
    before = {s: (fleet.repo.load(s).version, ledger_for_saga(fleet.sandbox_pool, s))
              for s in sagas}
    # when every message either saga ever caused is delivered again, twice, by a bare client
    agent = Celery("replayer", broker=broker, set_as_current=False)
    agent.conf.update(task_serializer="json", accept_content=["json"])
    replayed = [c for s in sagas for c in _scheduled_commands(fleet, s)] * 2
    for command in replayed:
        agent.send_task("sagafleet.step", args=command.as_args(), queue="sagafleet.steps")
    # and a fresh saga queued behind them completes (the one worker consumed them in order)
    marker = client.start("trip", TRIP_INPUT, key="replay-marker").saga_id
    assert settle(fleet, [marker])[marker] is SagaStatus.COMPLETED
    # then no replay appended an event or touched a ledger, and none was dead-lettered
    assert len(replayed) >= 16
    for saga_id, (version, ledger) in before.items():
        assert fleet.repo.load(saga_id).version == version
        assert ledger_for_saga(fleet.sandbox_pool, saga_id) == ledger
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM fleet.dead_letters").fetchone() == (0,)


def test_approval_expiring_while_the_fleet_is_down_is_asked_again_and_the_old_one_refused(
    fleet, database, broker, workers
):
    # given a capture waiting for a human, and then the whole fleet dies (SIGKILL)
    (worker,) = workers.start(1)
    client = fleet.client()
    saga_id = client.start("trip", {**TRIP_INPUT, "amount": 250_000}, key="outage").saga_id
    settle(fleet, [saga_id], parked=lambda loaded: bool(
        client.status(loaded.saga_id).pending_approvals))
    first_request = client.status(saga_id).pending_approvals[0]
    worker.kill()
    worker.wait()
    # when the fleet recovers two hours later (a new process; its clock is "later")
    later = shifted_fleet(database, broker, timedelta(hours=2))
    try:
        operator = person(later, "alice")
        # then the operator's late click on the expired request is refused, typed
        with pytest.raises(ApprovalExpired):
            operator.approve(saga_id, "capture_payment",
                             action_hash=first_request["action_hash"])
        assert ledger_for_saga(later.sandbox_pool, saga_id).captures == 0
        # and recovery asks again, with a fresh expiry and the reason in the evidence
        Sweeper(later).sweep()
        requests = [e for e in events_of(later, saga_id) if isinstance(e, ApprovalRequested)]
        assert len(requests) == 2 and requests[1].expires_at > requests[0].expires_at
        assert requests[1].evidence.reason == "approval expired"
        # and an answer to the new request lets the recovered fleet finish with one charge
        operator.approve(saga_id, "capture_payment")
        assert drive(later, saga_id) is SagaStatus.COMPLETED
        events = events_of(later, saga_id)
    finally:
        later.close()
    (grant,) = [e for e in events if isinstance(e, ApprovalGranted)]
    assert grant.approver == "alice" and grant.at > requests[1].at
    capture = next(e for e in events if isinstance(e, StepStarted)
                   and e.step_id == "capture_payment")
    assert events.index(capture) > events.index(grant)
    ledger = ledger_for_saga(fleet.sandbox_pool, saga_id)
    assert ledger.is_complete_trip and ledger.captures == 1 and not ledger.duplicates


_REGISTER_ELSEWHERE = """
import sys
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from workers.fleet import Fleet, FleetConfig
config = FleetConfig(database_url=sys.argv[1], broker_url=sys.argv[2])
fleet = Fleet(config, trip_tool_catalogue())
definition = trip_definition().model_copy(update={"name": "trip_elsewhere"})
planner = fleet.principals.add("default", "planner", "agent", ["admin"])
print(fleet.client_for(fleet.authenticate(planner.token)).register_definition(definition))
fleet.close()
"""


def test_saga_resumes_in_fresh_processes_that_never_saw_its_definition(
    database, broker, workers, faults, tmp_path
):
    # given a definition registered by a process that then exits, and a saga started by the CLI
    env = {**worker_env(database, broker),
           "SAGAFLEET_TOKEN": issue_token(database, "cli-agent", ["agent"])}
    registered = subprocess.run(  # noqa: S603
        [sys.executable, "-c", _REGISTER_ELSEWHERE, database, broker],
        env=env, capture_output=True, text=True, check=True).stdout.strip()
    started = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "sagafleet", "start", "trip_elsewhere",
         "--input", json.dumps(TRIP_INPUT), "--key", "elsewhere", "--json"],
        env=env, capture_output=True, text=True, check=True)
    saga_id = json.loads(started.stdout)["saga_id"]
    # and a reader process whose fleet never registered or built that definition
    reader = SandboxFleet(FleetConfig(database_url=database, broker_url=broker, lease_s=2.0,
                                      queue_wait_s=1.0, worker_id="reader"))
    # when the worker running it dies right after the payment provider committed
    freeze = AfterCommitFreeze(reader, faults, saga_id, "capture_payment", StepKind.FORWARD)
    try:
        workers.start(1)  # kill_if_frozen starts the replacement: another fresh process
        status = settle(reader, [saga_id], on_tick=lambda: freeze.kill_if_frozen(workers))
        # then the saga finished from the log alone, exactly once
        assert freeze.killed_pid is not None
        assert status[saga_id] is SagaStatus.COMPLETED
        events = events_of(reader, saga_id)
        first = events[0]
        assert isinstance(first, SagaStarted) and first.definition_hash == registered
        assert reader.repo.load(saga_id).definition.name == "trip_elsewhere"
        assert [e.result for e in events if isinstance(e, ReconciliationResult)] == ["found"]
        assert sum(isinstance(e, StepSucceeded) for e in events) == 4
        ledger = ledger_for_saga(reader.sandbox_pool, saga_id)
        assert ledger.is_complete_trip and not ledger.duplicates
    finally:
        freeze.release()
        reader.close()

