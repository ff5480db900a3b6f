"""Real claims race for a tenant window on PostgreSQL (issue 31, part 3): many sagas of one
tenant, each with one capture under the per-call limit, claimed at the same instant by
worker threads; the window lets exactly as many through as fit, the others ask a person."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from importlib.resources import files

import pytest

from application.client import SagaClient
from application.gate_windows.postgres import PostgresGateWindows
from application.messages import StepCommand
from application.orchestrator import Orchestrator
from application.secrets.postgres import SecretVault
from events import EventStore, apply_migrations
from events.definition_store.postgres import DefinitionStore
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.streams import saga_registry
from saga_core import AgentPlan, PlannedAction
from saga_core.access.roles import Principal
from saga_core.approval.totals import TENANT_WINDOW_SCOPE
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.engine.events import ApprovalRequested, StepStarted
from sagafleet.example_sagas import trip_tool_catalogue
from sagafleet.testing.publisher import RecordingPublisher
from sagafleet.testing.trip import TripTools
from workers.executor import StepExecutor, StepOutcome

pytestmark = pytest.mark.integration

SAGAS, ROOM = 8, 3  # eight captures of 100000 race for a window of 300000


def _catalogue() -> ToolCatalogue:
    window = {"tenant_window": {"limit": 100_000 * ROOM, "period": "PT1H"}}
    return ToolCatalogue(tools=[
        tool.model_copy(update={"gate": tool.gate.model_validate(
            {**tool.gate.model_dump(), **window})})
        if tool.name == "payments.capture" and tool.gate is not None else tool
        for tool in trip_tool_catalogue().tools])


@pytest.fixture
def store(fresh_database: str) -> Iterator[EventStore]:
    with EventStore.connect(fresh_database, pool_size=SAGAS + 2,
                            registry=saga_registry()) as store:
        store.migrate()
        apply_migrations(fresh_database, "fleet", files("workers").joinpath("migrations"))
        yield store


def test_racing_claims_of_many_sagas_never_pass_the_tenant_window(store: EventStore) -> None:
    # given eight sagas of one tenant, each about to claim one capture of 100000
    tools = TripTools(catalogue=_catalogue())
    log = PostgresSagaLog(store, DefinitionStore(store))
    orchestrator = Orchestrator(log, queue_wait=timedelta(seconds=10),
                                windows=PostgresGateWindows(store))
    publisher = RecordingPublisher()
    client = SagaClient(orchestrator, log.definitions, tools.catalogue,
                        secrets=SecretVault(store), publisher=publisher,
                        principal=Principal.in_process_agent("t", "agent"))
    plan = client.submit_plan(AgentPlan(actions=[PlannedAction(
        tool="payments.capture", args={"amount": 100_000, "currency": "EUR",
                                       "card_token": "${input.card_token}"})]))
    sagas = [client.start(plan.name, {"card_token": "tok_1"}, key=f"s{i}").saga_id
             for i in range(SAGAS)]
    commands: list[StepCommand] = []
    while (command := publisher.take()) is not None:
        commands.append(command)
    assert sorted(c.saga_id for c in commands) == sorted(sagas)
    # when one worker thread per saga claims at the same instant
    start = threading.Barrier(SAGAS)
    outcomes: list[StepOutcome] = []
    lock = threading.Lock()

    def work(command: StepCommand) -> None:
        executor = StepExecutor(orchestrator, tools.tool_set().registry, SecretVault(store),
                                worker_id=f"w-{command.saga_id}", lease=timedelta(seconds=30))
        start.wait()
        outcome = executor.handle(command)
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=work, args=(c,)) for c in commands]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then exactly three captures ran; every other saga asks a person over the window
    executed = [o for o in outcomes if o.verdict == "executed"]
    assert len(outcomes) == SAGAS and len(executed) == ROOM
    assert sum(c.amount for c in tools.books.charges.values()) == 100_000 * ROOM
    asked = []
    for saga_id in sagas:
        events = log.load_history(saga_id).events
        started = [e for e in events if isinstance(e, StepStarted)]
        requests = [e for e in events if isinstance(e, ApprovalRequested)]
        assert len(started) + len(requests) == 1
        asked += requests
    assert len(asked) == SAGAS - ROOM
    assert {r.scope for r in asked} == {TENANT_WINDOW_SCOPE}
    windows = {r.evidence.details["gate"]["tenant_window"]["before"] for r in asked}
    assert windows == {100_000 * ROOM}
