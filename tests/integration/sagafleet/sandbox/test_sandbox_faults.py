"""Fault injection at every boundary, configured in PostgreSQL, shared across connections."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from saga_core.contracts import ErrorClass, Receipt
from sagafleet.sandbox import (
    Boundary,
    FaultInjector,
    TripSandbox,
    build_trip_sandbox,
    ledger_for_saga,
)
from sagafleet.sandbox.faults import TRIP_OPERATIONS
from workers.tools import Absent, ToolError

FLIGHT = {"saga_id": "saga-f", "flight_id": "BA117", "customer_email": "grace@example.com"}


def hold_flight(trip: TripSandbox, key: str, saga_id: str = "saga-f") -> Receipt:
    return trip.registry.get("flights.hold", 1).execute({**FLIGHT, "saga_id": saga_id}, key)


def error_class_of(trip: TripSandbox, key: str, saga_id: str = "saga-f") -> ErrorClass | None:
    try:
        hold_flight(trip, key, saga_id)
    except ToolError as error:
        return error.error_class
    return None


def test_fail_before_commit_is_transient_and_commits_nothing(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given one injected 503 before commit
    trip.faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, count=1)
    # when the hold is attempted twice with the same key
    assert error_class_of(trip, "f1") is ErrorClass.TRANSIENT
    assert ledger_for_saga(sandbox_db, "saga-f").flight_holds == 0
    # then the retry succeeds and there is one hold
    hold_flight(trip, "f1")
    assert ledger_for_saga(sandbox_db, "saga-f").flight_holds == 1
    assert trip.faults.hit_counts() == {"fail_before_commit": 1}


def test_fail_before_commit_with_401_is_auth_expired(trip: TripSandbox) -> None:
    trip.faults.add("flights", "*", Boundary.FAIL_BEFORE_COMMIT, count=1, params={"status": 401})
    assert error_class_of(trip, "f-auth") is ErrorClass.AUTH_EXPIRED


def test_timeout_before_dispatch_is_ambiguous_and_commits_nothing(
    trip: TripSandbox, sandbox_db: str
) -> None:
    trip.faults.add("flights", "hold", Boundary.TIMEOUT_BEFORE_DISPATCH, count=1)
    assert error_class_of(trip, "f2") is ErrorClass.AMBIGUOUS
    assert ledger_for_saga(sandbox_db, "saga-f").flight_holds == 0
    assert isinstance(trip.registry.get("flights.hold", 1).lookup("f2"), Absent)


def test_commit_then_timeout_is_ambiguous_but_the_effect_exists_once(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given the response of a committed hold is lost
    trip.faults.add("flights", "hold", Boundary.COMMIT_THEN_TIMEOUT, count=1)
    assert error_class_of(trip, "f3") is ErrorClass.AMBIGUOUS
    # then lookup finds the receipt, a retry with the key replays it, one hold exists
    found = trip.registry.get("flights.hold", 1).lookup("f3")
    assert found == hold_flight(trip, "f3")
    assert ledger_for_saga(sandbox_db, "saga-f").flight_holds == 1


@pytest.mark.parametrize(
    ("tool", "args", "code"),
    [
        ("flights.hold", {**FLIGHT, "flight_id": "XX-SOLDOUT-1"}, "sold_out"),
        (
            "hotels.hold",
            {"saga_id": "saga-f", "hotel_id": "H-FULL", "nights": 2},
            "no_availability",
        ),
        (
            "payments.capture",
            {"saga_id": "saga-f", "amount": 100, "currency": "usd", "card_token": "tok_declined"},
            "card_declined",
        ),
    ],
)
def test_business_rules_reject_as_business_rejection(
    trip: TripSandbox, tool: str, args: dict[str, Any], code: str
) -> None:
    with pytest.raises(ToolError) as raised:
        trip.registry.get(tool, 1).execute(args, f"biz-{tool}")
    assert raised.value.error_class is ErrorClass.BUSINESS_REJECTION
    assert raised.value.details["code"] == code
    assert isinstance(trip.registry.get(tool, 1).lookup(f"biz-{tool}"), Absent)


def test_injected_business_rejection_for_one_saga_only(trip: TripSandbox, sandbox_db: str) -> None:
    # given a business rejection armed for saga A only
    trip.faults.add("flights", "hold", Boundary.BUSINESS_REJECTION, saga_id="saga-A")
    # then saga A is rejected, saga B is not
    assert error_class_of(trip, "fa", saga_id="saga-A") is ErrorClass.BUSINESS_REJECTION
    assert error_class_of(trip, "fb", saga_id="saga-B") is None
    assert ledger_for_saga(sandbox_db, "saga-A").flight_holds == 0


def test_key_prefix_narrows_a_rule(trip: TripSandbox) -> None:
    trip.faults.add("*", "*", Boundary.FAIL_BEFORE_COMMIT, key_prefix="doomed-")
    assert error_class_of(trip, "doomed-1") is ErrorClass.TRANSIENT
    assert error_class_of(trip, "fine-1") is None


@pytest.mark.parametrize(
    ("error_class", "expected"),
    [("transient", ErrorClass.TRANSIENT), ("permanent", ErrorClass.PERMANENT)],
)
def test_compensation_failure_leaves_the_hold_in_place(
    trip: TripSandbox, sandbox_db: str, error_class: str, expected: ErrorClass
) -> None:
    # given a hold and a failing release
    receipt = hold_flight(trip, "f4")
    trip.faults.add(
        "flights",
        "release",
        Boundary.COMPENSATION_FAILURE,
        count=1,
        params={"error_class": error_class},
    )
    release = trip.registry.get("flights.release", 1)
    args = {"saga_id": "saga-f", "hold_id": receipt.resource_id, "expected_version": 1}
    # when the release is attempted
    with pytest.raises(ToolError) as raised:
        release.execute(args, "f4-release")
    # then it fails with the configured class and the hold is still active
    assert raised.value.error_class is expected
    assert ledger_for_saga(sandbox_db, "saga-f").active_flight_holds == 1
    # and the release then succeeds with the same key
    assert release.execute(args, "f4-release").status == "released"


def test_probability_rules_are_deterministic_for_a_seed(trip: TripSandbox) -> None:
    keys = [f"p-{i}" for i in range(40)]

    def outcomes() -> list[ErrorClass | None]:
        return [error_class_of(trip, key) for key in keys]

    # given a 50% fault rule with seed "alpha"
    trip.faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, probability=0.5, seed="alpha")
    first = outcomes()
    # when the rule is re-armed with the same seed and the same calls are replayed
    trip.faults.clear()
    trip.faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, probability=0.5, seed="alpha")
    second = outcomes()
    # then the same calls fail; another seed gives another pattern
    assert first == second
    failed = sum(1 for outcome in first if outcome is ErrorClass.TRANSIENT)
    assert 8 <= failed <= 32
    trip.faults.clear()
    trip.faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, probability=0.5, seed="beta")
    assert outcomes() != first


def test_a_probability_fault_gives_each_retry_a_fresh_draw(trip: TripSandbox) -> None:
    # given a fault that fires half of the time, and the keys it hit on their first attempt
    trip.faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, probability=0.5, seed="s")
    keys = [f"retry-{i}" for i in range(30)]
    failed_once = [key for key in keys if error_class_of(trip, key) is not None]
    assert failed_once
    # when those keys are retried with the same key
    failed_twice = [key for key in failed_once if error_class_of(trip, key) is not None]
    # then the retry drew again: some passed (a per-key draw would fail them all forever)
    assert len(failed_twice) < len(failed_once)


def test_count_rules_are_shared_by_concurrent_connections(sandbox_db: str) -> None:
    # given a rule that fires exactly five times, and four workers each with its own
    # providers and connections (the way separate worker processes see the database)
    FaultInjector(sandbox_db).add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, count=5)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def worker(index: int) -> None:
        trip = build_trip_sandbox(sandbox_db)
        for n in range(10):
            outcome = error_class_of(trip, f"w{index}-{n}")
            with lock:
                outcomes[str(outcome)] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then exactly five calls of forty failed and the rule is spent
    assert outcomes == Counter({"Transient": 5, "None": 35})
    (rule,) = FaultInjector(sandbox_db).rules()
    assert rule.remaining == 0 and rule.fired == 5


def test_a_random_mix_arms_every_trip_operation_reproducibly(trip: TripSandbox) -> None:
    # when a 10% mix is configured without terminal faults
    ids = trip.faults.configure_mix(0.1, seed=7, include_terminal=False)
    rules = trip.faults.rules()
    # then every trip operation has rules, none terminal, and the rates add up to 10%
    assert len(ids) == len(rules)
    assert {(r.provider, r.operation) for r in rules} == {(p, o) for p, o, _ in TRIP_OPERATIONS}
    assert not {r.boundary for r in rules} & {"business_rejection", "target_changed"}
    per_operation: dict[tuple[str, str], float] = {}
    for rule in rules:
        assert rule.probability is not None
        ref = (rule.provider, rule.operation)
        per_operation[ref] = per_operation.get(ref, 0.0) + rule.probability
    assert all(abs(total - 0.1) < 1e-9 for total in per_operation.values())


def test_a_rule_that_matches_but_does_not_fire_leaves_one_effect_per_key(
    trip: TripSandbox, sandbox_db: str
) -> None:
    # given a rule for this operation at a boundary a call never reaches (lookups only)
    trip.faults.add("flights", "hold", Boundary.LOOKUP_UNAVAILABLE, count=5)
    # when the same key is used twice, and another key once
    first = hold_flight(trip, "armed-1")
    assert hold_flight(trip, "armed-1") == first
    hold_flight(trip, "armed-2")
    # then each key made exactly one hold (the undone claim left nothing behind)
    assert ledger_for_saga(sandbox_db, "saga-f").flight_holds == 2
    assert trip.faults.hit_counts() == {}


def test_a_run_counts_only_the_hits_after_its_mark(trip: TripSandbox) -> None:
    # given a hit logged by an earlier run on the same database
    trip.faults.add("flights", "hold", Boundary.FAIL_BEFORE_COMMIT, count=1)
    assert error_class_of(trip, "earlier") is ErrorClass.TRANSIENT
    # when a later run marks the log and meets a fault of its own
    mark = trip.faults.last_hit()
    trip.faults.add("flights", "hold", Boundary.BUSINESS_REJECTION, count=1)
    error_class_of(trip, "later")
    # then counting from its mark shows its own hit only; the whole log keeps both
    assert trip.faults.hit_counts(after=mark) == {"business_rejection": 1}
    assert trip.faults.hit_counts() == {"fail_before_commit": 1, "business_rejection": 1}
