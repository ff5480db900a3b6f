"""The sweeper on real PostgreSQL and Redis: a saga it cannot record for does not end the pass."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from fleet_harness import track_until
from trip_inputs import TRIP_INPUT

from application.messages import StepCommand
from application.orchestrator import MAX_RACES, utc_now
from events import ConcurrencyError
from events.saga_log.streams import saga_stream
from saga_core.contracts import StepKind
from saga_core.engine.events import SagaEvent, StepOutcomeUnknown
from workers.executor import Claimed
from workers.sweeper import Sweeper


class AlwaysOvertaken:
    """The fleet's real saga log, except that for one saga another writer always gets to
    the stream first: every append to it meets a version that moved on."""

    def __init__(self, log: Any, saga_id: str) -> None:
        self._log, self.saga_id, self.tries = log, saga_id, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def append(self, saga_id: str, tenant: str, events: Sequence[SagaEvent],
               expected_version: Any, **kw: Any) -> Any:
        if saga_id == self.saga_id:
            self.tries += 1
            raise ConcurrencyError(saga_stream(saga_id), expected_version,
                                   expected_version + 1)
        return self._log.append(saga_id, tenant, events, expected_version, **kw)


def _claim_first_step(fleet, saga_id: str) -> None:
    """Leave the saga as a worker that died holding its flight hold would."""
    command = StepCommand(saga_id=saga_id, step_id="hold_flight", kind=StepKind.FORWARD,
                          attempt=1)
    assert isinstance(fleet.executor.claim(command), Claimed)


def test_a_sweep_that_loses_every_race_on_one_saga_goes_on_with_the_next(fleet):
    # given two sagas, each left by a dead worker with an expired claim (the first started
    # first, so the sweep meets it first), and a log on which the first is always overtaken
    client = fleet.client()
    contended = client.start("trip", TRIP_INPUT, key="contended").saga_id
    calm = client.start("trip", TRIP_INPUT, key="calm").saga_id
    for saga_id in (contended, calm):
        _claim_first_step(fleet, saga_id)
    sweeper = Sweeper(fleet)
    track_until(sweeper, 2)
    fleet.orchestrator.clock = lambda: utc_now() + timedelta(hours=1)
    fleet.orchestrator.log = overtaken = AlwaysOvertaken(fleet.orchestrator.log, contended)
    before = fleet.repo.load(contended).version
    # when one sweep passes over both
    report = sweeper.sweep()
    # then the contended saga is reported as a lost race, and nothing was written to it
    assert overtaken.tries == MAX_RACES
    assert len(report.errors) == 1 and contended in report.errors[0], report.errors
    assert "lost" in report.errors[0]
    assert fleet.repo.load(contended).version == before
    # and the next saga was still swept: its expired claim recorded as an unknown outcome
    assert report.advanced == 1
    unknown = [e for e in fleet.repo.load_history(calm).events if isinstance(e, StepOutcomeUnknown)]
    assert [(e.step_id, e.attempt) for e in unknown] == [("hold_flight", 1)]
