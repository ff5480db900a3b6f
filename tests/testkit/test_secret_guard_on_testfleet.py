"""The last line of defence by value, on the in-memory kit (the same executor and client the
fleet runs): tools that echo their arguments, a secret given again where it does not
belong, a reason or a revised plan quoting it — each occurrence replaced before it is
written, and counted by place."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from trip_inputs import TRIP_INPUT

from application.telemetry.logs import StepContextFilter
from saga_core import AgentPlan, PlannedAction
from saga_core.contracts import ErrorClass, Receipt, SagaStatus
from saga_core.engine.events import CancelRequested, PlanRevised, SagaStarted
from saga_core.secret_scrub import SCRUBBED
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from sagafleet.testing import TestFleet
from sagafleet.testing.tools import Fault, InMemoryTools
from workers.tools import ToolError

CANARY = "tok_CANARY_b41d9e07_testkit"
log = logging.getLogger("echoing.provider")


def _echoing(catalogue_tool: str, tools: InMemoryTools) -> Callable[..., Receipt]:
    """A provider that echoes every argument into its receipt and its log, and declines a
    card whose token says so, quoting it."""
    spec = tools.catalogue.require(catalogue_tool, 1)

    def effect(args: Mapping[str, Any], key: str) -> Receipt:
        log.info("%s called with %s", catalogue_tool, dict(args))
        if "declined" in str(args.get("card_token", "")):
            raise ToolError(ErrorClass.BUSINESS_REJECTION,
                            f"card {args['card_token']} declined")
        fields = {name: args.get(name, 1) for name in spec.receipt_fields}
        return Receipt(resource_id=f"{catalogue_tool}-{key[:8]}", version=1,
                       fields={**fields, "echo": dict(args)})

    return effect


def _fleet() -> TestFleet:
    tools = InMemoryTools(trip_tool_catalogue())
    for spec in tools.catalogue.tools:
        tools.add(spec.name, _echoing(spec.name, tools))
    return TestFleet([trip_definition()], tools=tools)


def _everything(fleet: TestFleet, saga_id: str) -> str:
    return repr(fleet.events(saga_id))


def test_a_tool_that_echoes_the_card_token_leaves_only_a_marker_in_the_log() -> None:
    # given providers that echo their arguments into their receipts and their log lines
    fleet = _fleet()
    records: list[str] = []
    handler = _capturing(records)
    # when a trip runs with the canary as its card token
    try:
        saga = fleet.client(tenant="t").start("trip", {**TRIP_INPUT, "card_token": CANARY})
        fleet.run_until_idle()
    finally:
        logging.getLogger().removeHandler(handler)
    # then the capture received it and the trip completed
    assert fleet.state(saga.saga_id).status is SagaStatus.COMPLETED
    capture = fleet.state(saga.saga_id).forward["capture_payment"].receipt
    assert capture is not None and capture.fields["echo"]["card_token"] == SCRUBBED
    # and neither the log nor the provider's log lines hold it; each echo was counted
    assert CANARY not in _everything(fleet, saga.saga_id)
    assert any("payments.capture called with" in line for line in records)
    assert not any(CANARY in line for line in records)
    assert fleet.secret_guard.scrubbed("tool_result") == 1
    assert fleet.secret_guard.scrubbed("log") == 1


def test_a_declined_card_quoted_in_the_error_or_found_by_a_lookup_is_replaced() -> None:
    fleet = _fleet()
    client = fleet.client(tenant="t")
    # given a token the provider declines, quoting it in its error
    declined = f"{CANARY}_declined"
    first = client.start("trip", {**TRIP_INPUT, "card_token": declined}, key="d")
    # and a capture whose answer is lost after it committed, so the worker looks it up
    fleet.tools.fail_next("payments.capture", Fault.COMMIT_THEN_TIMEOUT)
    second = client.start("trip", {**TRIP_INPUT, "card_token": CANARY}, key="l")
    fleet.run_until_idle()
    assert fleet.state(first.saga_id).status is SagaStatus.COMPENSATED
    assert fleet.state(second.saga_id).status is SagaStatus.COMPLETED
    # then the error and the receipt the lookup found hold a marker, never the token
    failure = fleet.state(first.saga_id).forward["capture_payment"]
    assert failure.error_message is not None and SCRUBBED in failure.error_message
    for saga in (first, second):
        assert CANARY not in _everything(fleet, saga.saga_id)
    assert fleet.secret_guard.scrubbed("lookup") == 1


def test_a_secret_given_again_in_an_ordinary_field_or_the_reason_is_replaced_at_start() -> None:
    fleet = _fleet()
    # when an agent gives the token in its secret field and again in the hotel id, the
    # reason and the lineage
    saga = fleet.client(tenant="t").start(
        "trip", {**TRIP_INPUT, "card_token": CANARY, "hotel_id": CANARY},
        key="k", reason=f"charge {CANARY}", lineage={"agent_request_id": CANARY})
    # then SagaStarted records a marker in each
    started = fleet.events(saga.saga_id)[0]
    assert isinstance(started, SagaStarted)
    assert started.input["card_token"] == {"$secret": "card_token"}
    assert started.input["hotel_id"] == SCRUBBED
    assert started.reason == f"charge {SCRUBBED}"
    assert CANARY not in repr(started)
    assert fleet.secret_guard.scrubbed("start") == 3
    # and the same start again is the same request (the input hash is of what was given)
    again = fleet.client(tenant="t").start(
        "trip", {**TRIP_INPUT, "card_token": CANARY, "hotel_id": CANARY},
        key="k", reason=f"charge {CANARY}")
    assert (again.saga_id, again.created) == (saga.saga_id, False)


def test_a_reason_quoting_the_saga_s_secret_is_replaced_before_it_is_recorded() -> None:
    fleet = _fleet()
    client = fleet.client(tenant="t")
    saga = client.start("trip", {**TRIP_INPUT, "card_token": CANARY})
    # when the agent cancels it, quoting the token
    client.cancel(saga.saga_id, reason=f"the card {CANARY} is stolen")
    # then the recorded reason holds a marker
    cancel = next(e for e in fleet.events(saga.saga_id) if isinstance(e, CancelRequested))
    assert cancel.reason == f"the card {SCRUBBED} is stolen"
    assert fleet.secret_guard.scrubbed("command") == 1


def test_a_revised_plan_writing_the_saga_s_secret_as_a_literal_records_a_marker() -> None:
    fleet = _fleet()
    client = fleet.client(tenant="t")
    capture = PlannedAction(tool="payments.capture", id="pay", args={
        "amount": 100, "currency": "EUR", "card_token": "${input.card_token}"})
    plan = client.submit_plan(AgentPlan(actions=[capture]))
    saga = client.start(plan.name, {"card_token": CANARY})
    # when the agent revises the plan with a hotel whose id is the token, written out
    hotel = PlannedAction(tool="hotels.hold", id="ht", args={
        "hotel_id": CANARY, "nights": 1, "guest_email": "a@example.com"})
    client.revise_plan(saga.saga_id, AgentPlan(actions=[capture, hotel]))
    # then the revision recorded holds a marker, and the hotel is held with it
    revised = next(e for e in fleet.events(saga.saga_id) if isinstance(e, PlanRevised))
    assert CANARY not in repr(revised)
    assert fleet.secret_guard.scrubbed("plan") == 1
    fleet.run_until_idle()
    assert fleet.state(saga.saga_id).status is SagaStatus.COMPLETED
    assert CANARY not in _everything(fleet, saga.saga_id)


@pytest.fixture(autouse=True)
def _info_logging() -> Any:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    yield
    root.setLevel(level)


def _capturing(records: list[str]) -> logging.Handler:
    """A root handler with the fleet's filter, keeping each formatted line."""

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.addFilter(StepContextFilter())
    logging.getLogger().addHandler(handler)
    return handler


def test_a_dry_run_shows_the_marker_the_start_would_record() -> None:
    fleet = _fleet()
    # when a dry run is given the token in its secret field and again in the hotel id
    planned = fleet.client(tenant="t").dry_run(
        "trip", {**TRIP_INPUT, "card_token": CANARY, "hotel_id": CANARY}, key="k")
    # then it shows what the start would record: the placeholder and the marker
    shown = repr(planned)
    assert CANARY not in shown and SCRUBBED in shown
    assert fleet.secret_guard.scrubbed("answer") >= 1
