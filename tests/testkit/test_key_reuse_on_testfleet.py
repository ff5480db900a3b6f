"""A reused operation key with another payload, in the test kit: refused before any call.

``orders.place`` does not dedupe by key (the catalogue says so), so a second call under
the same key with another price would simply place a second order. The engine never makes
that call: decide escalates before scheduling it, and the worker refuses it at claim time
when the log changed under a writer that did not decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from saga_core import OperatorActionRejected, SagaDefinition, ToolCatalogue
from saga_core.contracts import Receipt, SagaStatus, StepKind
from saga_core.engine.events import ManualInterventionRequired, StepStarted, StepSucceeded
from saga_core.engine.state import RunStatus
from sagafleet.testing import Fault, InMemoryTools, TestFleet, TripTools

F = StepKind.FORWARD

CATALOGUE = ToolCatalogue.model_validate({"tools": [
    {"name": "quotes.get", "version": 1, "semantics": "read_only", "receipt_fields": ["price"],
     "args": {"item": {"type": "string"}}},
    {"name": "orders.place", "version": 1, "semantics": "irreversible", "dedupes_by_key": False,
     "args": {"item": {"type": "string"}, "price": {"type": "integer"}}},
]})

ORDER = SagaDefinition.model_validate({
    "name": "order", "version": 1,
    "input": {"item": {"type": "string", "min_length": 1}},
    "steps": [
        {"id": "quote", "tool": "quotes.get", "version": 1, "semantics": "read_only",
         "args": {"item": "${input.item}"},
         "retry": {"max_attempts": 3, "base_delay_s": 1.0, "max_delay_s": 5.0}},
        {"id": "place", "tool": "orders.place", "version": 1, "semantics": "irreversible",
         "depends_on": ["quote"],
         "args": {"item": "${input.item}", "price": "${steps.quote.receipt.price}"},
         "retry": {"max_attempts": 5, "base_delay_s": 1.0, "max_delay_s": 5.0}},
    ],
})


def order_tools() -> InMemoryTools:
    """Quotes at 100; orders placed as a new effect on every call (no dedupe by key)."""
    tools = InMemoryTools(CATALOGUE)

    def quote(args: Mapping[str, Any], key: str) -> Receipt:
        return Receipt(resource_id=f"quote-{args['item']}", fields={"price": 100})

    def place(args: Mapping[str, Any], key: str) -> Receipt:
        return Receipt(resource_id=f"order-{len(tools.effects) + 1}",
                       fields={"price": args["price"]})

    tools.add("quotes.get", quote)
    tools.add("orders.place", place)
    return tools


def an_order_whose_first_placement_failed() -> tuple[TestFleet, InMemoryTools, str]:
    """The placement was called once, answered 503 (nothing committed), retry scheduled."""
    tools = order_tools()
    tools.fail_next("orders.place", Fault.FAIL_BEFORE_COMMIT)
    fleet = TestFleet([ORDER], tools)
    saga_id = fleet.client().start("order", {"item": "lamp"}).saga_id
    fleet.run_until_idle()
    run = fleet.state(saga_id).run("place", F)
    assert (run.status, run.attempt) == (RunStatus.SCHEDULED, 2)
    assert tools.fired == [("orders.place", Fault.FAIL_BEFORE_COMMIT, saga_id)]
    assert tools.effects_of("orders.place") == []
    return fleet, tools, saga_id


def requote(fleet: TestFleet, saga_id: str, price: int) -> StepSucceeded:
    """The quote's receipt as recorded anew, with another price."""
    return StepSucceeded(at=fleet.clock(), step_id="quote", kind=F, attempt=1,
                         operation_key=fleet.state(saga_id).run("quote", F).operation_key,
                         receipt=Receipt(resource_id="quote-lamp", fields={"price": price}))


def test_the_worker_refuses_the_reused_key_in_its_claim_and_the_saga_escalates() -> None:
    # given an order whose retry is due, and a quote recorded anew by a writer that did not
    # decide (another version, a repair script): nothing escalated yet
    fleet, tools, saga_id = an_order_whose_first_placement_failed()
    loaded = fleet.log.load(saga_id)
    fleet.log.append(saga_id, loaded.tenant, [requote(fleet, saga_id, 120)], loaded.version)
    assert fleet.state(saga_id).status is SagaStatus.RUNNING
    fleet.clock.advance(60)
    # when a worker handles the due retry
    outcome = fleet.executor.handle(StepCommand(saga_id=saga_id, step_id="place", kind=F,
                                                attempt=2))
    # then it called nothing: its commit holds the escalation in place of the claim
    assert outcome.verdict == "escalated"
    assert outcome.committed is not None
    assert [type(e) for e in outcome.committed.events] == [ManualInterventionRequired]
    assert tools.effects_of("orders.place") == [] and len(tools.fired) == 1
    state = fleet.state(saga_id)
    assert state.status is SagaStatus.MANUAL_INTERVENTION
    key = state.run("place", F).operation_key
    assert key in outcome.reason and "${steps.quote.receipt.price}" in outcome.reason
    # and the sweeper and the queue leave it waiting for a person
    fleet.advance(600)
    assert fleet.state(saga_id).status is SagaStatus.MANUAL_INTERVENTION
    assert tools.effects_of("orders.place") == []


def test_the_operator_retries_the_order_as_a_new_operation_under_a_new_key() -> None:
    # given an order paused because its retry would reuse the key with another price
    fleet, tools, saga_id = an_order_whose_first_placement_failed()
    client = fleet.person("ops", roles={"operator"})
    fleet.orchestrator.commit(fleet.log.load(saga_id), [requote(fleet, saga_id, 120)])
    view = client.status(saga_id)
    assert view.status == "MANUAL_INTERVENTION" and view.escalation is not None
    old_key = fleet.state(saga_id).run("place", F).operation_key
    assert old_key in view.escalation["reason"]
    # when the operator asks for the same key, then that does not fit the pause
    with pytest.raises(OperatorActionRejected, match="retry_as_new_operation"):
        client.resolve(saga_id, "retry_step", step_id="place", reason="again")
    # when they retry it as a new operation
    client.resolve(saga_id, "retry_as_new_operation", step_id="place",
                   reason="checked: the 503 placed nothing")
    fleet.run_until_idle()
    # then exactly one order is placed, under a new key, at the price the saga now holds
    (placed,) = tools.effects_of("orders.place", saga_id)
    assert placed.key != old_key and placed.receipt.get("price") == 120
    assert fleet.state(saga_id).status is SagaStatus.COMMITTED_WITH_REPAIR
    claims = [e for e in fleet.events(saga_id)
              if isinstance(e, StepStarted) and e.step_id == "place"]
    assert [(c.attempt, c.operation_key == old_key) for c in claims] == [(1, True), (3, False)]


def test_a_re_claim_after_the_lease_ran_out_is_refused_when_the_request_changed() -> None:
    # given a trip whose capture committed and whose worker died before recording it (the
    # provider dedupes by key, so the claim may be taken again once its lease runs out)
    fleet = TestFleet()
    tools = fleet.tools
    assert isinstance(tools, TripTools)
    saga_id = fleet.client().start("trip", TRIP_INPUT).saga_id
    tools.fail_next("payments.capture", Fault.WORKER_CRASH_AFTER_COMMIT, saga_id=saga_id)
    fleet.run_until_idle()
    assert fleet.crashed and tools.ledger(saga_id).captures == 1
    # and a hotel receipt recorded anew meanwhile by a writer that did not decide
    loaded = fleet.log.load(saga_id)
    hotel = loaded.state.run("hold_hotel", F)
    assert hotel.receipt is not None
    moved = StepSucceeded(at=fleet.clock(), step_id="hold_hotel", kind=F, attempt=hotel.attempt,
                          operation_key=hotel.operation_key,
                          receipt=hotel.receipt.model_copy(update={"resource_id": "HH-other"}))
    fleet.log.append(saga_id, loaded.tenant, [moved], loaded.version)
    # when the lease has run out and a worker takes the capture's claim again
    fleet.clock.advance(31)
    outcome = fleet.executor.handle(StepCommand(saga_id=saga_id, step_id="capture_payment",
                                                kind=F, attempt=1))
    # then it records the escalation in place of the claim (and so calls nothing)
    assert outcome.verdict == "escalated" and outcome.committed is not None
    assert [type(e) for e in outcome.committed.events] == [ManualInterventionRequired]
    assert "${steps.hold_hotel.receipt.resource_id}" in outcome.reason
    claims = [e for e in fleet.events(saga_id)
              if isinstance(e, StepStarted) and e.step_id == "capture_payment"]
    assert len(claims) == 1 and tools.ledger(saga_id).captures == 1
    assert fleet.state(saga_id).status is SagaStatus.MANUAL_INTERVENTION
