"""The one commit API on the in-memory saga log: what a commit records, claims and leaves
to publish, the one retry after a lost race, and a sweep of one saga (no servers)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from application.client import SagaClient
from application.messages import StepCommand
from application.orchestrator import ClaimNext, Orchestrator, RaceLost
from application.secrets.memory import MemorySecrets
from events import ConcurrencyError
from events.definition_store.memory import MemoryDefinitions
from events.saga_log.memory import MemorySagaLog
from events.saga_log.port import LoadedSaga
from saga_core.access.roles import Principal
from saga_core.contracts import StepKind
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.validation import validate_definition
from saga_core.engine.events import SagaEvent, StepOutcomeUnknown, StepScheduled, StepStarted
from saga_core.engine.state import SagaState
from saga_core.errors import SagaError
from sagafleet.example_sagas import trip_definition, trip_tool_catalogue
from workers.sweeper import sweep_saga

TRIP_INPUT = {
    "customer_email": "ada@example.com", "flight_id": "FL1", "hotel_id": "HT1", "nights": 1,
    "amount": 10_000, "currency": "EUR", "card_token": "tok_4242",
}
LEASE = timedelta(seconds=30)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Published:
    """The commands a caller published, in order (a publisher that only remembers)."""

    def __init__(self) -> None:
        self.commands: list[StepCommand] = []

    def publish(self, commands: Sequence[StepCommand]) -> int:
        self.commands.extend(commands)
        return len(commands)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def orchestrator(clock: Clock) -> Orchestrator:
    definitions = MemoryDefinitions()
    catalogue: ToolCatalogue = trip_tool_catalogue()
    definitions.register_shared(validate_definition(trip_definition(), catalogue))
    return Orchestrator(MemorySagaLog(definitions), clock, queue_wait=timedelta(seconds=10))


def _started(orchestrator: Orchestrator, published: Published) -> LoadedSaga:
    definitions = orchestrator.log.definitions  # type: ignore[attr-defined]
    client = SagaClient(orchestrator, definitions, trip_tool_catalogue(),
                        secrets=MemorySecrets(), publisher=published,
                        principal=Principal.in_process_agent("default", "agent"))
    return orchestrator.log.load(client.start("trip", TRIP_INPUT, key="k").saga_id)


def _claim_everything(lease: timedelta, worker: str = "w1") -> ClaimNext:
    """A ClaimNext that takes every scheduled step (as a worker's claim_due does)."""

    def claim(state: SagaState, now: datetime) -> list[tuple[StepCommand, StepStarted]]:
        return [
            (StepCommand(saga_id=state.saga_id, step_id=run.step_id, kind=run.kind,
                         attempt=run.attempt),
             StepStarted(at=now, step_id=run.step_id, kind=run.kind, attempt=run.attempt,
                         operation_key=run.operation_key,
                         request_hash="0" * 64, worker_id=worker,
                         lease_expires_at=now + lease))
            for run in state.forward.values() if run.status.name == "SCHEDULED"
        ]

    return claim


def test_a_start_commits_once_and_wakes_one_worker_for_the_parallel_holds(orchestrator):
    # given a client that publishes after its commit
    published = Published()
    # when it starts a trip, whose two holds may run side by side
    loaded = _started(orchestrator, published)
    # then both holds are scheduled in the start's own commit, and one message went out
    scheduled = [e.step_id for e in loaded.events if isinstance(e, StepScheduled)]
    assert sorted(scheduled) == ["hold_flight", "hold_hotel"]
    assert [c.step_id for c in published.commands] == [scheduled[0]]


def test_a_commit_that_claims_takes_the_due_steps_in_the_same_append(orchestrator):
    # given a started trip
    loaded = _started(orchestrator, Published())
    # when a worker commits with something to claim
    committed = orchestrator.commit(loaded, [], claim=_claim_everything(LEASE))
    # then both holds are claimed in one append and nothing is left to wake anyone for
    assert sorted(c.step_id for c in committed.claimed) == ["hold_flight", "hold_hotel"]
    assert committed.wake_ups == () and committed.commands == ()
    assert committed.loaded.version == loaded.version + 2
    assert orchestrator.log.load(loaded.saga_id).version == committed.loaded.version


def test_a_commit_on_a_stale_saga_is_refused_and_record_retries_on_a_fresh_read(orchestrator):
    # given a saga someone else wrote to after we read it
    stale = _started(orchestrator, Published())
    orchestrator.commit(stale, [], claim=_claim_everything(LEASE))
    # when we commit on what we read, the log refuses it
    with pytest.raises(ConcurrencyError):
        orchestrator.commit(stale, [], claim=_claim_everything(LEASE, "w2"))
    # and record builds again on a fresh read (where nothing is left to claim)
    seen: list[int] = []

    def build(loaded: LoadedSaga) -> list[SagaEvent]:
        seen.append(loaded.version)
        return []

    committed = orchestrator.record(stale.saga_id, build, known=stale,
                                    claim=_claim_everything(LEASE, "w2"))
    assert seen == [stale.version, stale.version + 2]
    assert committed is not None and committed.claimed == ()


def test_record_gives_up_with_race_lost_which_is_a_saga_error(orchestrator):
    # given a saga whose every commit meets a moved stream
    loaded = _started(orchestrator, Published())

    def always_overtaken(_: LoadedSaga) -> None:
        raise ConcurrencyError("saga-x", 1, 2)

    # then retrying gives up with RaceLost, which callers catch as a SagaError
    with pytest.raises(RaceLost) as caught:
        orchestrator.retrying(loaded.saga_id, always_overtaken)
    assert isinstance(caught.value, SagaError)


def test_sweeping_a_saga_records_an_expired_claim_and_publishes_nothing_itself(
    orchestrator, clock
):
    # given a trip whose holds were claimed by a worker that then died
    loaded = orchestrator.commit(_started(orchestrator, Published()), [],
                                 claim=_claim_everything(LEASE)).loaded
    # when the sweep comes after the lease ran out
    clock.now += LEASE + timedelta(seconds=1)
    swept = sweep_saga(orchestrator, loaded, timedelta(seconds=10))
    # then both expired claims are recorded as outcomes to reconcile, and both lookups
    # (each a message of its own) are the sweep's wake-ups for the caller to publish
    assert swept.committed is not None and swept.republish == ()
    unknown = [e for e in swept.committed.events if isinstance(e, StepOutcomeUnknown)]
    assert sorted(e.step_id for e in unknown) == ["hold_flight", "hold_hotel"]
    assert sorted((c.step_id, c.kind, c.attempt) for c in swept.wake_ups) == [
        ("hold_flight", StepKind.FORWARD, 1), ("hold_hotel", StepKind.FORWARD, 1)]
    assert orchestrator.log.load(loaded.saga_id).version == swept.committed.loaded.version
