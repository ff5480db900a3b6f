"""A worker's message handling in this process (real PostgreSQL and Redis, no worker
process): parallel branches claimed in one append, next steps claimed ahead and run
inline, results ready together recorded together, and only what no one claimed
published."""

from __future__ import annotations

import time
from itertools import groupby

from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from saga_core.contracts import SagaStatus, StepKind
from workers.branches import SagaBranches
from workers.celery_app import QUEUE_STEPS, broker_redis


def _handle_trip_message(fleet, kind: type[SagaBranches], saga_id: str) -> list[list[str]]:
    """Handle a started trip's one message as a worker would (inline budget 8), check that
    the trip completed and that every handed command was accounted for; each append's
    event types, in order."""
    branches = kind(fleet.executor, fleet.publisher, fleet.branches, budget=8)
    branches.run(StepCommand(saga_id=saga_id, step_id="hold_flight", kind=StepKind.FORWARD,
                             attempt=1))
    branches.join()
    assert branches.calling() == 0
    loaded = fleet.repo.load_history(saga_id)
    assert loaded.state.status is SagaStatus.COMPLETED
    return [[r.type for r in group] for _, group in
            groupby(loaded.records, key=lambda r: r.position.transaction_id)]


def test_one_message_runs_a_whole_trip_claiming_parallel_holds_in_one_append(fleet, broker):
    # given a started trip: its start published one wake-up for both parallel holds
    saga = fleet.client().start("trip", TRIP_INPUT, key="branches")
    queue = broker_redis(broker)
    assert queue.llen(QUEUE_STEPS) == 1
    # when this process handles that one message as a worker would, with inline budget
    appends = _handle_trip_message(fleet, SagaBranches, saga.saga_id)
    # then the trip completed without another message being published
    assert queue.llen(QUEUE_STEPS) == 1
    # and both holds were claimed in one append (one transaction), before either result
    claims = next(types for types in appends if "StepStarted" in types)
    assert claims.count("StepStarted") == 2 and "StepSucceeded" not in claims
    # and every later step was claimed in the commit of the result before it
    later = [types for types in appends[appends.index(claims) + 1:] if "StepStarted" in types]
    assert later and all("StepSucceeded" in types for types in later)


class _WaitingBranches(SagaBranches):
    """Branches whose commits wait until no sibling is still calling its tool: the case
    of siblings whose tools answer at once, made certain rather than likely."""

    def pause(self) -> None:
        deadline = time.monotonic() + 30
        while self.calling() and time.monotonic() < deadline:
            time.sleep(0.001)


def test_results_ready_together_are_recorded_in_one_append(fleet, broker):
    # given a started trip, handled by a worker whose parallel holds finish together
    saga = fleet.client().start("trip", TRIP_INPUT, key="together")
    # when it handles the trip's one message (and the trip completes)
    appends = _handle_trip_message(fleet, _WaitingBranches, saga.saga_id)
    # then both holds' receipts went into one append, which also claimed the next step
    results = next(types for types in appends if "StepSucceeded" in types)
    assert results.count("StepSucceeded") == 2 and results.count("StepStarted") == 1
    # so the trip took five appends, not six: start, claim, holds, payment, message
    assert len(appends) == 5
