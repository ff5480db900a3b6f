"""The fleet end to end: real worker processes on real PostgreSQL and Redis.

Each scenario asserts the business invariant from the providers' ledgers and the journal
history, not only the state label.
"""

from __future__ import annotations

import time

from fleet_harness import redis_client
from principal_support import authenticated, person
from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from saga_core.access.roles import PrincipalKind
from saga_core.contracts import SagaStatus, StepKind
from saga_core.engine.events import (
    ApprovalRequested,
    CancelRequested,
    ReconciliationResult,
    StepStarted,
    StepSucceeded,
)
from sagafleet.sandbox import ledger_for_saga


def _events(fleet, saga_id):
    return list(fleet.repo.load_history(saga_id).events)


def _awaiting_approval(fleet, workers, wait_settled, key):
    """One worker, and a trip above the approval limit whose capture now waits for a human."""
    workers.start(1)
    client = fleet.client()
    saga = client.start("trip", {**TRIP_INPUT, "amount": 250_000}, key=key)
    wait_settled(saga.saga_id, until=lambda s: bool(
        client.status(saga.saga_id).pending_approvals))
    return client, saga


def test_happy_path_completes_with_one_trip_and_one_charge(fleet, workers, wait_settled):
    # given one worker process
    workers.start(1)
    # when an agent starts a trip
    saga = fleet.client().start("trip", TRIP_INPUT, key="happy")
    # then it completes, and the ledgers hold exactly one trip and one net charge
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.is_complete_trip and not ledger.duplicates
    assert ledger.net_charge == TRIP_INPUT["amount"] and ledger.itineraries_sent == 1
    # and every step recorded intent before its result
    events = _events(fleet, saga.saga_id)
    for step in ("hold_flight", "hold_hotel", "capture_payment", "send_itinerary"):
        started = [i for i, e in enumerate(events)
                   if isinstance(e, StepStarted) and e.step_id == step]
        done = [i for i, e in enumerate(events)
                if isinstance(e, StepSucceeded) and e.step_id == step]
        assert started and done and started[0] < done[0]


def test_a_version_registered_by_another_process_is_started_on_at_once(fleet):
    # given a client that has started "tour" v1 (so it knows v1 as the highest version)
    from application.client import SagaClient
    from events.definition_store.postgres import DefinitionStore
    from sagafleet.example_sagas import trip_definition

    v1 = {**trip_definition().model_dump(mode="json"), "name": "tour", "version": 1}
    # (an authenticated agent that may also register definitions, as an admin)
    owner = authenticated(fleet, "tour-owner", ("agent", "admin"), kind=PrincipalKind.AGENT)
    mine = fleet.client_for(owner)
    mine.register_definition(v1)
    assert mine.start("tour", TRIP_INPUT).definition_version == 1
    # when another process registers v2, whose input adds a field v1 does not know
    theirs = SagaClient(fleet.orchestrator, DefinitionStore(fleet.store), fleet.catalogue,
                        secrets=fleet.secrets, publisher=fleet.publisher,
                        principal=owner)
    v2 = {**v1, "version": 2,
          "input": {**v1["input"], "note": {"type": "string", "required": False}}}
    theirs.register_definition(v2)
    # then the first client starts on v2 (its cached v1 is confirmed stale in the start's
    # own transaction), accepting the new field, and keeps using v2 afterwards
    started = mine.start("tour", {**TRIP_INPUT, "note": "window seat"}, key="tour-1")
    assert started.definition_version == 2 and started.created
    assert mine.start("tour", TRIP_INPUT, key="tour-2").definition_version == 2
    # and a repeated key still answers with the saga it started, not a conflict
    again = mine.start("tour", {**TRIP_INPUT, "note": "window seat"}, key="tour-1")
    assert again.saga_id == started.saga_id and not again.created
    # and when v3 arrives with input v2 accepts as well, the start written on the cached v2
    # is rolled back inside its transaction and made again on v3 under the same key
    theirs.register_definition({**v2, "version": 3})
    third = mine.start("tour", TRIP_INPUT, key="tour-3")
    assert third.definition_version == 3 and third.created
    events = fleet.repo.load_history(third.saga_id).events
    assert [e.event_type for e in events].count("SagaStarted") == 1


def test_rejection_at_the_pivot_compensates_in_dependency_order(fleet, workers, wait_settled):
    # given an itinerary that the email provider will reject (the pivot fails)
    workers.start(1)
    saga = fleet.client().start(
        "trip", {**TRIP_INPUT, "customer_email": "ada@bounce.invalid"}, key="reject")
    # then the saga is compensated and the ledgers show no holds and no net charge
    assert wait_settled(saga.saga_id) is SagaStatus.COMPENSATED
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.is_unwound and ledger.net_charge == 0 and ledger.captured == TRIP_INPUT["amount"]
    # and the payment was refunded before the holds it depends on were released
    order = [e.step_id for e in _events(fleet, saga.saga_id)
             if isinstance(e, StepSucceeded) and e.kind is StepKind.COMPENSATION]
    assert order[0] == "capture_payment"
    assert set(order) == {"capture_payment", "hold_flight", "hold_hotel"}


def test_response_lost_after_commit_is_reconciled_as_found(fleet, faults, workers, wait_settled):
    # given the flight provider commits the hold and then loses the response, once
    faults.add("flights", "hold", "commit_then_timeout", count=1)
    workers.start(1)
    saga = fleet.client().start("trip", TRIP_INPUT, key="lost-response")
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    # then the lookup by key found the hold: one hold, never a second one
    results = [e.result for e in _events(fleet, saga.saga_id)
               if isinstance(e, ReconciliationResult)]
    assert results == ["found"]
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.flight_holds == 1 and ledger.is_complete_trip


def test_timeout_before_dispatch_is_reconciled_absent_then_retried(
    fleet, faults, workers, wait_settled
):
    # given the request never reached the provider, but the caller saw a timeout
    faults.add("hotels", "hold", "timeout_before_dispatch", count=1)
    workers.start(1)
    saga = fleet.client().start("trip", TRIP_INPUT, key="absent")
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    # then reconciliation confirmed absence and the retry used the same key
    events = _events(fleet, saga.saga_id)
    assert [e.result for e in events if isinstance(e, ReconciliationResult)] == ["absent"]
    keys = {e.operation_key for e in events
            if isinstance(e, StepStarted) and e.step_id == "hold_hotel"}
    assert len(keys) == 1
    assert ledger_for_saga(fleet.sandbox_pool, saga.saga_id).hotel_holds == 1


def test_approval_granted_then_completed(fleet, workers, wait_settled):
    client, saga = _awaiting_approval(fleet, workers, wait_settled, "approve")
    assert ledger_for_saga(fleet.sandbox_pool, saga.saga_id).captures == 0
    alice = person(fleet, "alice")
    alice.approve(saga.saga_id, "capture_payment")
    # a second click is a no-op
    alice.approve(saga.saga_id, "capture_payment")
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    assert ledger_for_saga(fleet.sandbox_pool, saga.saga_id).captures == 1


def test_approval_denied_compensates_the_holds(fleet, workers, wait_settled):
    client, saga = _awaiting_approval(fleet, workers, wait_settled, "deny")
    person(fleet, "bob").deny(saga.saga_id, "capture_payment", reason="too expensive")
    assert wait_settled(saga.saga_id) is SagaStatus.COMPENSATED
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.captures == 0 and ledger.is_unwound


def test_duplicate_message_has_no_second_effect(fleet, wait_settled, workers):
    # given a saga whose first step command is delivered twice before any worker runs
    saga = fleet.client().start("trip", TRIP_INPUT, key="dup")
    command = StepCommand(saga_id=saga.saga_id, step_id="hold_flight",
                          kind=StepKind.FORWARD, attempt=1)
    fleet.publisher.publish([command, command])
    workers.start(2)
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.flight_holds == 1 and not ledger.duplicates
    claims = [e for e in _events(fleet, saga.saga_id)
              if isinstance(e, StepStarted) and e.step_id == "hold_flight"]
    assert len(claims) == 1


def test_worker_killed_mid_step_loses_no_saga_and_duplicates_nothing(
    fleet, workers, wait_settled
):
    # given a slow provider and a worker that dies (SIGKILL) while calling it
    (victim,) = workers.start(1, tool_latency_s=2.0, lease_s=3.0)
    saga = fleet.client().start("trip", TRIP_INPUT, key="sigkill")
    deadline = time.monotonic() + 30
    while not any(isinstance(e, StepStarted) for e in _events(fleet, saga.saga_id)):
        assert time.monotonic() < deadline, "no step was ever claimed"
        time.sleep(0.05)
    victim.kill()
    victim.wait()
    # when a fresh worker joins and the sweeper notices the expired lease
    workers.start(1, tool_latency_s=0.0)
    # then the saga finishes with exactly one trip
    assert wait_settled(saga.saga_id, timeout=90) is SagaStatus.COMPLETED
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.is_complete_trip and not ledger.duplicates


def test_redis_flushed_mid_run_loses_no_saga(fleet, broker, workers, wait_settled):
    # given sagas whose step commands are queued but no worker runs yet
    sagas = [fleet.client().start("trip", TRIP_INPUT, key=f"flush-{i}") for i in range(3)]
    # when Redis loses every message
    redis_client(broker).flushdb()
    workers.start(1)
    # then the sweeper re-enqueues from the log and every saga completes once
    for saga in sagas:
        assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
        assert ledger_for_saga(fleet.sandbox_pool, saga.saga_id).is_complete_trip


def test_approval_left_to_expire_is_asked_again(fleet, workers, wait_settled):
    from datetime import timedelta

    client, saga = _awaiting_approval(fleet, workers, wait_settled, "expire")
    # when the clock passes the request's expiry, the sweeper records a fresh request
    real_clock = fleet.clock
    fleet.clock = lambda: real_clock() + timedelta(hours=2)
    fleet.orchestrator.clock = fleet.clock
    fleet.orchestrator.advance(saga.saga_id)
    requests = [e for e in _events(fleet, saga.saga_id) if isinstance(e, ApprovalRequested)]
    assert len(requests) == 2 and requests[1].expires_at > requests[0].expires_at


def test_cancel_while_waiting_for_approval_releases_the_holds(fleet, workers, wait_settled):
    # given a trip whose capture waits for a human, both holds already taken
    client, saga = _awaiting_approval(fleet, workers, wait_settled, "cancel")
    # when an operator cancels it (a second cancel is a no-op)
    client.as_actor("carol").cancel(saga.saga_id, reason="customer changed plans")
    client.as_actor("carol").cancel(saga.saga_id, reason="customer changed plans")
    # then what was done is compensated and nothing was charged
    assert wait_settled(saga.saga_id) is SagaStatus.COMPENSATED
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.is_unwound and ledger.captures == 0
    cancels = [e for e in _events(fleet, saga.saga_id) if isinstance(e, CancelRequested)]
    assert len(cancels) == 1 and cancels[0].actor == "carol"


def test_load_many_folds_each_saga_like_load_and_names_missing_ones(fleet):
    from events.saga_log.streams import SagaNotFound

    # given two started sagas (no worker runs them) and an id that names no saga
    client = fleet.client()
    first = client.start("trip", TRIP_INPUT, key="load-many-1")
    second = client.start("trip", {**TRIP_INPUT, "nights": 2}, key="load-many-2")
    # when they are loaded together
    found = fleet.repo.load_many([first.saga_id, "no-such-saga", second.saga_id])
    # then each saga is folded as a single load folds it, and the missing one is its error
    for saga_id in (first.saga_id, second.saga_id):
        alone = fleet.repo.load(saga_id)
        assert found[saga_id].state == alone.state
        assert found[saga_id].version == alone.version
    assert isinstance(found["no-such-saga"], SagaNotFound)
