"""The declared conditions' building blocks: receipt conditions, validation, hashes kept, old
logs folding unchanged, and the time rules as properties."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from core_harness import T0, C, F, Saga
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from saga_core import (
    DefinitionError,
    ErrorClass,
    Escalate,
    Receipt,
    SagaDefinition,
    SagaStatus,
    ToolCatalogue,
    due_work,
    fold,
    load_event,
)
from saga_core.definitions.conditions import Postcondition, ReceiptCondition
from saga_core.definitions.validation import validate_definition
from saga_core.engine.decision_types import MissDeadline, MissPostcondition, ObservePostcondition
from saga_core.engine.events import PostconditionObserved
from saga_core.engine.state import RunStatus
from saga_core.limits import LimitExceeded
from sagafleet.example_sagas import payout_definition, payout_tool_catalogue, trip_definition

# Three trip logs (completed; compensated after an operator's mark_compensated; in flight
# after a transient failure), their definition and folded states, recorded with the code of
# commit acb4424, before conditions existed, through core_harness.Saga.
FIXTURE = Path(__file__).parent / "fixtures" / "logs_before_conditions.json"
INPUT = {"source": "acc-a", "destination": "acc-b", "amount": 500}


# -- receipt conditions ----------------------------------------------------------------------

RECEIPT = Receipt(resource_id="R-1", version=2, status="settled",
                  fields={"amount": 500, "flag": True, "one": 1})


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        ({"field": "status", "op": "eq", "value": "settled"}, True),
        ({"field": "status", "op": "ne", "value": "settled"}, False),
        ({"field": "status", "op": "in", "value": ["pending", "settled"]}, True),
        ({"field": "status", "op": "not_in", "value": ["settled"]}, False),
        ({"field": "amount", "op": "ge", "value": 500}, True),
        ({"field": "amount", "op": "gt", "value": 500}, False),
        ({"field": "version", "op": "lt", "value": 3}, True),
        ({"field": "amount", "op": "le", "value": 499.5}, False),
        ({"field": "flag", "op": "eq", "value": 1}, False),  # True is not 1
        ({"field": "one", "op": "eq", "value": True}, False),  # nor 1 True
        ({"field": "flag", "op": "gt", "value": 0}, False),  # booleans are not ordered
        ({"field": "missing", "op": "ne", "value": "x"}, False),  # a missing field shows nothing
        ({"field": "missing", "op": "absent"}, True),
        ({"field": "amount", "op": "present"}, True),
    ],
)
def test_a_receipt_condition_compares_one_field_with_a_constant(
    condition: dict[str, Any], holds: bool
) -> None:
    assert ReceiptCondition.model_validate(condition).holds(RECEIPT) is holds


@pytest.mark.parametrize(
    "condition",
    [
        {"field": "status", "op": "in", "value": "settled"},
        {"field": "status", "op": "in", "value": []},
        {"field": "amount", "op": "gt", "value": "10"},
        {"field": "amount", "op": "gt", "value": True},
        {"field": "amount", "op": "ge", "value": float("inf")},
        {"field": "status", "op": "present", "value": "x"},
        {"field": "status", "op": "eq", "value": {"a": 1}},
        {"field": "status", "op": "matches", "value": ".*"},
    ],
)
def test_a_malformed_receipt_condition_is_refused(condition: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ReceiptCondition.model_validate(condition)


def test_receipt_conditions_and_their_values_are_bounded() -> None:
    with pytest.raises(LimitExceeded, match="condition_values"):
        ReceiptCondition(field="status", op="in", value=[str(i) for i in range(65)])
    many = [{"field": "status", "op": "present"}] * 17
    with pytest.raises(LimitExceeded, match="receipt_conditions"):
        Postcondition.model_validate({"observe": "receipt", "receipt": many, "horizon_s": 1})


def test_a_postcondition_observed_on_the_receipt_needs_a_condition() -> None:
    with pytest.raises(ValidationError, match="at least one receipt condition"):
        Postcondition.model_validate({"observe": "receipt", "horizon_s": 5})


def test_a_postcondition_may_only_read_fields_its_tool_returns() -> None:
    with pytest.raises(ValidationError, match=r"does not return: \['settled_at'\]"):
        ToolCatalogue.model_validate({"tools": [{
            "name": "t", "semantics": "idempotent", "receipt_fields": ["amount"],
            "postcondition": {"observe": "lookup", "horizon_s": 5,
                              "receipt": [{"field": "settled_at", "op": "present"}]},
        }]})


# -- validation ----------------------------------------------------------------------------


def _payout(**step_changes: Any) -> dict[str, Any]:
    data = payout_definition().model_dump(mode="json")
    data.pop("tools")
    for step in data["steps"]:
        step.update(step_changes.get(step["id"], {}))
    return data


def _problems(data: dict[str, Any], catalogue: ToolCatalogue | None = None) -> set[str]:
    with pytest.raises(DefinitionError) as raised:
        validate_definition(SagaDefinition.model_validate(data),
                            catalogue or payout_tool_catalogue())
    return {f"{p.where}: {p.rule}" for p in raised.value.problems}


def test_a_forward_precondition_is_checked_like_the_arguments() -> None:
    data = _payout(debit={"precondition": {"a": "${receipt.version}", "b": "${input.nope}",
                                           "c": "${steps.credit.receipt.amount}"}})
    assert _problems(data) == {
        "step debit precondition: own_receipt_in_forward",
        "step debit precondition: unknown_input",
        "step debit precondition: receipt_not_dependency",
    }


def test_a_policy_for_a_time_nothing_declares_is_refused() -> None:
    catalogue = payout_tool_catalogue().model_dump(mode="json")
    for tool in catalogue["tools"]:
        tool.pop("timeout_s", None)
        tool.pop("deadline_s", None)
    data = _payout(debit={"timeout_s": None}, credit={"on_timeout": "escalate"})
    data["steps"][0]["compensation"]["deadline_s"] = None
    assert _problems(data, ToolCatalogue.model_validate(catalogue)) == {
        "step debit: policy_without_deadline",
        "step credit: policy_without_deadline",
        "step debit compensation: policy_without_deadline",
    }


def test_compensate_is_refused_as_a_policy_at_or_after_the_pivot() -> None:
    data = _payout(credit={"pivot": True, "on_precondition_failed": "compensate"})
    assert "step credit: compensate_after_pivot" in _problems(data)


def test_an_invariant_is_bounded_and_not_blank() -> None:
    data = _payout()
    data["invariant"] = "   "
    assert _problems(data) == {"definition invariant: blank_invariant"}
    data["invariant"] = "x" * 2_001
    with pytest.raises(LimitExceeded, match="invariant_chars"):
        SagaDefinition.from_json(json.dumps(data))


def test_definitions_without_the_new_fields_keep_their_hash() -> None:
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert trip_definition().content_hash() == recorded["definition_hash"]
    assert "invariant" not in trip_definition().model_dump(mode="json")


# -- logs recorded before ------------------------------------------------------------------


def _summary(state: Any) -> dict[str, Any]:
    def runs(by_id: Any) -> dict[str, Any]:
        return {k: {"status": str(r.status), "attempt": r.attempt,
                    "operation_key": r.operation_key,
                    "receipt": r.receipt.model_dump(mode="json") if r.receipt else None,
                    "reconciliations": r.reconciliations, "request_hash": r.request_hash,
                    "error_class": str(r.error_class) if r.error_class else None}
                for k, r in sorted(by_id.items())}
    return {"status": str(state.status), "phase": state.phase, "version": state.version,
            "retry_budget_left": state.retry_budget_left,
            "escalation": state.escalation.reason if state.escalation else None,
            "compensation_reason": state.compensation_reason,
            "forward": runs(state.forward), "compensation": runs(state.compensation)}


@pytest.mark.parametrize("name", ["completed", "compensated", "in_flight"])
def test_a_log_recorded_before_conditions_existed_folds_to_the_same_state(name: str) -> None:
    # given a log (and its definition) recorded by the code before this change
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    definition = SagaDefinition.model_validate(recorded["definition"])
    assert definition.content_hash() == recorded["definition_hash"]
    log = recorded["logs"][name]
    events = [load_event(e["type"], e["data"]) for e in log["events"]]
    # when it is folded today
    state = fold(definition, events)
    # then it is the state it was, and its events dump as they were stored
    assert _summary(state) == log["state"]
    assert [e.model_dump(mode="json") for e in events] == [e["data"] for e in log["events"]]
    # and nothing declared a condition in it
    runs = [*state.forward.values(), *state.compensation.values()]
    assert all(r.timeout_at is None and r.verify_since is None for r in runs)


# -- time rules as properties --------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(timeout_s=st.floats(min_value=0.001, max_value=86_400),
       probes=st.lists(st.floats(min_value=0, max_value=2), min_size=1, max_size=6))
def test_a_timeout_is_missed_exactly_once_and_exactly_when_it_passes(
    timeout_s: float, probes: list[float]
) -> None:
    # given a payout whose debit declares timeout_s, claimed at T0 with a long lease
    data = _payout(debit={"timeout_s": timeout_s, "on_timeout": "retry"})
    saga = Saga(validate_definition(SagaDefinition.model_validate(data),
                                    payout_tool_catalogue()), dict(INPUT))
    saga.record()
    saga.claim("debit", lease_s=10 * 86_400)
    timeout_at = saga.state.run("debit", F).timeout_at
    assert timeout_at == T0 + timedelta(seconds=timeout_s)
    missed = 0
    for fraction in sorted(probes):
        # when the orchestrator and the sweeper look at any moment
        saga.now = max(saga.now, T0 + timedelta(seconds=timeout_s * fraction))
        due = [d.action for d in due_work(saga.state, saga.now, timedelta(0))]
        decisions = saga.record()
        found = [d for d in decisions if isinstance(d, MissDeadline)]
        # then the miss is due and recorded only at or after the timeout, and only once
        if saga.now < timeout_at:
            assert found == [] and "timeout" not in due
        missed += len(found)
        if found:
            assert "timeout" in due and found[0].deadline == timeout_at
    assert missed == (1 if saga.now >= timeout_at else 0)


LOOKUP = st.sampled_from(["settled", "pending", "absent", "unknown"])


@settings(max_examples=80, deadline=None)
@given(answers=st.lists(st.tuples(LOOKUP, st.floats(min_value=0, max_value=90)),
                        min_size=1, max_size=12))
def test_a_verifying_step_advances_only_on_an_observed_postcondition(
    answers: list[tuple[str, float]]
) -> None:
    # given a credit whose receipt arrived pending, looked up with any answers at any times
    saga = Saga(payout_definition(), dict(INPUT))
    saga.record()
    saga.run_ok("debit")
    saga.record()
    saga.claim("credit")
    saga.succeed("credit", receipt=Receipt(resource_id="CR-1", status="pending",
                                           fields={"account": "b", "amount": 500}))
    horizon_end = saga.now + timedelta(seconds=120)
    answered = iter(answers)
    for _ in range(40):
        decisions = saga.record()
        for decision in decisions:
            if isinstance(decision, MissPostcondition):
                assert decision.horizon_end == horizon_end
        run = saga.state.run("credit", F)
        # then no lookup is ever scheduled after the horizon
        if run.status is RunStatus.RECONCILING:
            assert run.not_before is not None and run.not_before <= horizon_end
        if decisions:
            continue
        if run.status is not RunStatus.RECONCILING:
            break
        answer, wait = next(answered, ("pending", 60.0))
        saga.now = max(saga.now + timedelta(seconds=wait), run.not_before or saga.now)
        status = "settled" if answer == "settled" else "pending"
        receipt = Receipt(resource_id="CR-1", status=status, fields={"amount": 500})
        saga.lookup("credit", "found" if answer in ("settled", "pending") else answer,
                    receipt=receipt)
    # and the saga ends verified, or waits for a person with the credit never advanced
    state = saga.state
    observed = [e for e in saga.events if isinstance(e, PostconditionObserved)]
    credit = state.run("credit", F)
    if state.status is SagaStatus.COMPLETED:
        assert len(observed) == 1 and observed[0].receipt.status == "settled"
        assert "settled" in [a for a, _ in answers]
    else:
        assert state.status is SagaStatus.MANUAL_INTERVENTION
        assert observed == [] and credit.status is RunStatus.VERIFYING
        assert credit.postcondition_missed


# -- receipt-only postconditions, compensation deadlines ----------------------------------


def _with_catalogue(change: Any, **step_changes: Any) -> Saga:
    document = payout_tool_catalogue().model_dump(mode="json")
    change(document)
    catalogue = ToolCatalogue.model_validate(document)
    definition = validate_definition(SagaDefinition.model_validate(_payout(**step_changes)),
                                     catalogue)
    return Saga(definition, dict(INPUT))


def _receipt_observed(document: dict[str, Any]) -> None:
    credit = next(t for t in document["tools"] if t["name"] == "accounts.credit")
    credit["postcondition"] = {"observe": "receipt", "horizon_s": 60,
                               "receipt": [{"field": "status", "op": "eq", "value": "settled"},
                                           {"field": "amount", "op": "ge", "value": 1}]}


def test_a_receipt_that_shows_the_postcondition_advances_without_a_lookup() -> None:
    saga = _with_catalogue(_receipt_observed)
    saga.record()
    saga.run_ok("debit")
    saga.record()
    saga.claim("credit")
    saga.succeed("credit", receipt=Receipt(resource_id="CR-1", status="settled",
                                           fields={"amount": 500}))
    (observed, *_rest) = saga.settle()
    assert isinstance(observed, ObservePostcondition) and observed.how == "receipt"
    assert saga.state.status is SagaStatus.COMPLETED


def test_a_receipt_that_does_not_show_it_is_looked_up_until_one_does() -> None:
    saga = _with_catalogue(_receipt_observed)
    saga.record()
    saga.run_ok("debit")
    saga.record()
    saga.claim("credit")
    pending = Receipt(resource_id="CR-1", status="pending", fields={"amount": 500})
    saga.succeed("credit", receipt=pending)
    assert [type(d).__name__ for d in saga.record()] == ["Reconcile"]
    saga.lookup("credit", "found", receipt=pending.model_copy(update={"status": "settled"}))
    (observed, *_rest) = saga.settle()
    assert isinstance(observed, ObservePostcondition) and observed.how == "lookup"
    assert saga.state.run("credit", F).receipt.status == "settled"  # type: ignore[union-attr]
    assert saga.state.status is SagaStatus.COMPLETED


def _refusing_credit(saga: Saga) -> Saga:
    saga.record()
    saga.run_ok("debit")
    saga.record()
    saga.claim("credit")
    saga.fail("credit", ErrorClass.BUSINESS_REJECTION, msg="account closed")
    saga.settle()  # compensation begins, the refund is scheduled
    return saga


def test_a_compensation_deadline_under_retry_is_recorded_and_the_undo_goes_on() -> None:
    data = _payout()
    data["steps"][0]["compensation"]["on_deadline"] = "retry"
    saga = _refusing_credit(Saga(validate_definition(SagaDefinition.model_validate(data),
                                                     payout_tool_catalogue()), dict(INPUT)))
    saga.tick(600)
    (missed,) = saga.record()
    assert isinstance(missed, MissDeadline) and missed.policy == "retry"
    assert saga.record() == []  # nothing more: the scheduled refund just runs
    saga.claim("debit", C)
    saga.succeed("debit", C)
    saga.settle()
    assert saga.state.status is SagaStatus.COMPENSATED


@settings(max_examples=60, deadline=None)
@given(deadline_s=st.floats(min_value=0.01, max_value=86_400),
       probes=st.lists(st.floats(min_value=0, max_value=2), min_size=1, max_size=6))
def test_a_compensation_deadline_is_missed_once_exactly_when_it_passes(
    deadline_s: float, probes: list[float]
) -> None:
    # given a refund under way (its deadline counted from when compensation began)
    data = _payout()
    data["steps"][0]["compensation"]["deadline_s"] = deadline_s
    saga = _refusing_credit(Saga(validate_definition(SagaDefinition.model_validate(data),
                                                     payout_tool_catalogue()), dict(INPUT)))
    begun = saga.state.compensation_started_at
    assert begun is not None
    due = begun + timedelta(seconds=deadline_s)
    saga.claim("debit", C, lease_s=10 * 86_400)
    misses = 0
    for fraction in sorted(probes):
        saga.now = max(saga.now, begun + timedelta(seconds=deadline_s * fraction))
        swept = [d.action for d in due_work(saga.state, saga.now, timedelta(0))]
        found = [d for d in saga.record() if isinstance(d, MissDeadline)]
        # then it is due and recorded only once it passed, and only once
        if saga.now < due:
            assert found == [] and "deadline" not in swept
        else:
            assert misses + len(found) == 1
        misses += len(found)
    assert misses == (1 if saga.now >= due else 0)
    assert (saga.state.status is SagaStatus.MANUAL_INTERVENTION) is (misses == 1)


def test_a_declared_precondition_without_a_policy_escalates_naming_the_precondition() -> None:
    # found by the mutation run (issue 36): decide.py:525 survived every test
    saga = Saga(validate_definition(
        SagaDefinition.model_validate(_payout(debit={"on_precondition_failed": None})),
        payout_tool_catalogue()), dict(INPUT))
    saga.record()
    saga.claim("debit")
    saga.fail("debit", ErrorClass.PRECONDITION_FAILED, msg="balance 10 below 500")
    (escalation,) = saga.decide()
    assert isinstance(escalation, Escalate) and escalation.reason == (
        "precondition of debit failed: balance 10 below 500; policy: escalate")
