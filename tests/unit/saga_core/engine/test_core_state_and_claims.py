"""evolve/fold purity, the event registry, claim checks and the sweeper's due work."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import replace
from datetime import timedelta

import pytest
from core_harness import C, F, Saga, trip_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_properties import definitions

from saga_core import (
    SAGA_EVENT_TYPES,
    CancelRequested,
    DefinitionMismatchError,
    ErrorClass,
    EventRejected,
    SagaDefinition,
    SagaEvent,
    SagaFinished,
    SagaStatus,
    check_claim,
    due_work,
    dump_event,
    evolve,
    fold,
    load_event,
)
from saga_core.engine import state as state_module
from sagafleet.example_sagas import trip_definition


def _started_flight() -> Saga:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.claim("hold_flight")
    return saga


def test_every_event_type_is_registered_versioned_and_round_trips() -> None:
    saga = _started_flight()
    saga.succeed("hold_flight")
    assert set(SAGA_EVENT_TYPES) >= {
        "SagaStarted",
        "StepScheduled",
        "StepStarted",
        "StepSucceeded",
        "StepFailed",
        "StepOutcomeUnknown",
        "ReconciliationScheduled",
        "ReconciliationResult",
        "ApprovalRequested",
        "ApprovalGranted",
        "ApprovalDenied",
        "CompensationStarted",
        "CancelRequested",
        "ManualInterventionRequired",
        "OperatorAction",
        "SagaFinished",
    }
    for cls in SAGA_EVENT_TYPES.values():
        assert cls.schema_version == 1 and SAGA_EVENT_TYPES[cls.event_type] is cls
    for event in saga.events:
        assert load_event(event.event_type, dump_event(event)) == event
    with pytest.raises(EventRejected):
        load_event("NoSuchEvent", {})


def test_events_are_frozen_and_need_an_aware_time() -> None:
    event = CancelRequested(at=Saga(trip_definition()).now, actor="op")
    with pytest.raises(ValueError):
        event.actor = "eve"  # type: ignore[misc]
    with pytest.raises(ValueError):
        CancelRequested(at=event.at.replace(tzinfo=None), actor="op")
    with pytest.raises(ValueError):
        SagaFinished(at=event.at, state=SagaStatus.RUNNING)


def test_evolve_never_mutates_its_input() -> None:
    saga = _started_flight()
    before = saga.state
    snapshot = (before.version, dict(before.forward), before.forward["hold_flight"])
    after = evolve(before, CancelRequested(at=saga.now, actor="op"))
    assert after is not before and after.cancel_requested and not before.cancel_requested
    assert (before.version, dict(before.forward), before.forward["hold_flight"]) == snapshot
    assert after.version == before.version + 1


def test_fold_refuses_a_different_definition_and_events_after_finish() -> None:
    saga = _started_flight()
    other = SagaDefinition.model_validate({**trip_definition().model_dump(), "version": 99})
    with pytest.raises(DefinitionMismatchError):
        fold(other, saga.events)
    finished: list[SagaEvent] = [
        *saga.events,
        SagaFinished(at=saga.now, state=SagaStatus.COMPLETED),
    ]
    with pytest.raises(EventRejected):
        fold(trip_definition(), [*finished, CancelRequested(at=saga.now, actor="op")])


def test_check_claim_accepts_only_the_current_due_unheld_attempt() -> None:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    assert check_claim(saga.state, "hold_flight", F, 1, saga.now)
    assert not check_claim(saga.state, "hold_flight", F, 2, saga.now)
    assert not check_claim(saga.state, "capture_payment", F, 1, saga.now)  # not scheduled
    assert not check_claim(saga.state, "hold_flight", C, 1, saga.now)  # not compensating
    saga.claim("hold_flight")
    verdict = check_claim(saga.state, "hold_flight", F, 1, saga.now)
    assert not verdict and "claimed by w1" in verdict.reason
    # flights dedupe by key: after the lease expired a re-claim with the same key is safe
    assert check_claim(saga.state, "hold_flight", F, 1, saga.now + timedelta(seconds=31))
    saga.succeed("hold_flight")
    assert not check_claim(saga.state, "hold_flight", F, 1, saga.now)


def test_check_claim_refuses_forward_work_after_cancel_and_delayed_retries_early() -> None:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    saga.claim("hold_flight")
    saga.fail("hold_flight", ErrorClass.TRANSIENT)
    (retry,) = saga.record()
    early = check_claim(saga.state, "hold_flight", F, 2, saga.now - timedelta(seconds=1))
    assert not early and "not due" in early.reason
    assert check_claim(saga.state, "hold_flight", F, 2, retry.not_before)  # type: ignore[attr-defined]
    saga.append(CancelRequested(at=saga.now, actor="op"))
    assert check_claim(saga.state, "hold_hotel", F, 1, saga.now).reason == "cancel requested"


def test_due_work_lists_only_overdue_work_for_the_sweeper() -> None:
    saga = Saga(trip_definition(), trip_input())
    saga.record()
    wait = timedelta(seconds=10)
    assert due_work(saga.state, saga.now + timedelta(seconds=5), wait) == []  # queue wait normal
    overdue = due_work(saga.state, saga.now + timedelta(seconds=11), wait)
    assert [(d.step_id, d.action) for d in overdue] == [
        ("hold_flight", "execute"),
        ("hold_hotel", "execute"),
    ]
    saga.claim("hold_flight")
    saga.claim("hold_hotel")
    later = saga.now + timedelta(seconds=31)
    assert {d.action for d in due_work(saga.state, later, wait)} == {"lease_expired"}
    saga.succeed("hold_flight")
    saga.succeed("hold_hotel")
    # decide has something to say (schedule the payment): the sweeper is told to decide
    assert [d.action for d in due_work(saga.state, saga.now, wait)] == ["decide"]


def test_every_value_the_fold_returns_is_frozen() -> None:
    # found by the mutation run (issue 36): ApprovalState's and StepRun's frozen=True
    # survived every test. The fold shares runs between states (a snapshot of the forward
    # runs at each first claim): a run changed in place would change every state holding it.
    values = [c for _, c in inspect.getmembers(state_module, inspect.isclass)
              if dataclasses.is_dataclass(c) and c.__module__ == state_module.__name__]
    names = {c.__name__ for c in values}
    assert {"SagaState", "StepRun", "ApprovalState", "Escalation"} <= names
    assert [c.__name__ for c in values if not c.__dataclass_params__.frozen] == []  # type: ignore[attr-defined]


def test_a_runs_first_claim_snapshot_stays_out_of_equality_and_repr() -> None:
    # found by the mutation run (issue 36): state.py:155 survived every test. The snapshot is
    # derived from the same log as the run, so it never decides equality, and comparing or
    # printing it would walk every earlier snapshot it holds.
    saga = Saga(trip_definition(), trip_input())
    saga.settle()
    started = saga.claim("hold_flight")
    run = saga.state.run("hold_flight", F)
    assert run.forward_at_first_claim is not None and started.operation_key == run.operation_key
    other = replace(run, forward_at_first_claim={})
    assert other == run and repr(other) == repr(run)
    assert "forward_at_first_claim" not in repr(run)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), saga_id=st.text(min_size=1, max_size=40))
def test_a_starts_fresh_runs_are_the_pending_runs_of_every_step(
    definition: SagaDefinition, saga_id: str
) -> None:
    # Given any definition and saga id (quotes, escapes, any unicode), folded twice: the
    # second start finds the definition's operations kept
    steps = [step.id for step in definition.steps]
    for _ in range(2):
        fresh = state_module._fresh_runs(saga_id, definition)
        plain = state_module._pending_runs(saga_id, definition, steps)
        # Then both paths give the same runs, field by field and in the same order
        for kept, reference in zip(fresh, plain, strict=True):
            assert list(kept) == list(reference)
            assert [vars(run) for run in kept.values()] == [
                vars(run) for run in reference.values()]
