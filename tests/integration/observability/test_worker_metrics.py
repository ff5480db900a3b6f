"""A running ``sagafleet worker --metrics-port`` serves its own Prometheus metrics: after a
known fleet run, the scrape (read with prometheus_client's parser) counts every tool call,
claim and compensation it made, by tool, kind and outcome."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

from fleet_harness import SandboxFleet, WorkerProcesses, settle
from principal_support import token_for
from prometheus_client.parser import text_string_to_metric_families
from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

from application.messages import StepCommand
from application.orchestrator import commands_due
from saga_core.contracts import SagaStatus
from saga_core.engine.events import CancelRequested, StepStarted

DEADLINE_S = 60.0
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int, fleet: SandboxFleet) -> tuple[dict[str, str], Samples]:
    """(family name -> type, (sample name, sorted labels) -> value), once the worker serves,
    scraped as Prometheus does: with a fleet operator's token."""
    token = token_for(fleet, "prometheus", ("fleet_operator",), tenant="fleet")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                text = response.read().decode()
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    types, samples = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return types, samples


def command_tool(fleet: SandboxFleet, saga_id: str, command: StepCommand) -> str:
    """The tool a step command calls."""
    return fleet.repo.load(saga_id).definition.tool_for(command.step_id, command.kind)[0]


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


def test_a_worker_exposes_what_it_did_by_tool_kind_and_outcome(
        fleet: SandboxFleet, workers: WorkerProcesses) -> None:
    # given one worker serving its metrics
    port = free_port()
    workers.start(1, args=("--metrics-port", str(port)))
    # when it runs two trips that complete and one whose itinerary bounces (the pivot is
    # refused, so the two holds and the capture before it are compensated)
    client = fleet.client()
    sagas = [client.start("trip", TRIP_INPUT, key=f"ok-{i}").saga_id for i in range(2)]
    sagas.append(client.start("trip", BOUNCING_INPUT, key="bounce").saga_id)
    states = settle(fleet, sagas)
    assert sorted(states.values()) == sorted(
        [SagaStatus.COMPLETED, SagaStatus.COMPLETED, SagaStatus.COMPENSATED])

    # then its scrape parses, with the conventional types and names
    types, samples = scrape(port, fleet)
    assert types["sagafleet_worker_step_duration_seconds"] == "histogram"
    for counter in ("claims", "races_lost", "redeliveries", "reconciliations",
                    "compensations", "dead_letters", "step_commands"):
        assert types[f"sagafleet_worker_{counter}"] == "counter", counter
    assert types["process_resident_memory_bytes"] == "gauge"

    def calls(tool: str, kind: str, outcome: str) -> float:
        return samples[("sagafleet_worker_step_duration_seconds_count",
                        labels(tool=tool, kind=kind, outcome=outcome))]

    # and every tool call is in the latency histogram: three holds, two itineraries sent,
    # one refused, three compensations
    assert calls("flights.hold", "forward", "succeeded") == 3
    assert calls("email.send_itinerary", "forward", "succeeded") == 2
    assert calls("email.send_itinerary", "forward", "failed") == 1
    for tool in ("flights.release", "hotels.release", "payments.refund"):
        assert calls(tool, "compensation", "succeeded") == 1
        assert samples[("sagafleet_worker_compensations_total",
                        labels(tool=tool, outcome="succeeded"))] == 1
    bucket = ("sagafleet_worker_step_duration_seconds_bucket",
              labels(tool="flights.hold", kind="forward", outcome="succeeded", le="+Inf"))
    assert samples[bucket] == 3
    # and each operation was claimed exactly once (claims by stream version)
    assert samples[("sagafleet_worker_claims_total",
                    labels(tool="flights.hold", kind="forward"))] == 3
    assert samples[("sagafleet_worker_claims_total",
                    labels(tool="payments.refund", kind="compensation"))] == 1
    # and nothing was dead-lettered or reconciled in a run without faults
    assert not any(name in ("sagafleet_worker_dead_letters_total",
                            "sagafleet_worker_reconciliations_total")
                   for name, _ in samples)
    # and no label names a saga
    assert all(label not in ("saga_id", "step_id") for _, lbls in samples for label, _ in lbls)


def test_the_port_may_come_from_the_environment(
        fleet: SandboxFleet, workers: WorkerProcesses) -> None:
    # given a worker told its port by SAGAFLEET_WORKER_METRICS_PORT (no option)
    port = free_port()
    workers.start(1, extra_env={"SAGAFLEET_WORKER_METRICS_PORT": str(port)})
    # when it has run a saga
    saga = fleet.client().start("trip", TRIP_INPUT, key="env-port").saga_id
    assert settle(fleet, [saga]) == {saga: SagaStatus.COMPLETED}
    # then it serves the saga's four forward calls there
    _, samples = scrape(port, fleet)
    assert sum(value for (name, lbls), value in samples.items()
               if name == "sagafleet_worker_step_duration_seconds_count") == 4


def test_a_message_a_killed_worker_held_counts_as_redelivered_where_it_lands(
        fleet: SandboxFleet, workers: WorkerProcesses) -> None:
    # given a worker whose tools take 30 s, its messages invisible to others for 3 s
    short = {"SAGAFLEET_VISIBILITY_TIMEOUT_SECONDS": "3"}
    [victim] = workers.start(1, tool_latency_s=30.0, extra_env=short)
    saga = fleet.client().start("trip", TRIP_INPUT, key="killed-mid-step").saga_id
    # when it is SIGKILLed once it claimed the first step (the message unacknowledged)
    deadline = time.monotonic() + DEADLINE_S
    while not any(isinstance(e, StepStarted) for e in fleet.repo.load_history(saga).events):
        assert time.monotonic() < deadline, "the worker never claimed the step"
        time.sleep(0.05)
    victim.kill()
    victim.wait()
    # and a replacement serving its metrics comes up and the saga is finished
    port = free_port()
    workers.start(1, extra_env=short, args=("--metrics-port", str(port)))
    assert settle(fleet, [saga]) == {saga: SagaStatus.COMPLETED}
    # then the replacement counts the message the broker handed out again, once (the
    # sweeper's messages may have finished the saga before it came back: wait for it)
    redelivered = ("sagafleet_worker_redeliveries_total", labels(task="sagafleet.step"))
    deadline = time.monotonic() + DEADLINE_S
    while redelivered not in (samples := scrape(port, fleet)[1]):
        assert time.monotonic() < deadline, "the killed worker's message never came back"
        time.sleep(0.25)
    assert samples[redelivered] == 1
    # and the lookups by key that settled the dead worker's claims (the two holds, claimed
    # together as parallel branches; their leases ran out)
    lookups = [dict(lbls) for (name, lbls) in samples
               if name == "sagafleet_worker_reconciliations_total"]
    assert {lookup["tool"] for lookup in lookups} == {"flights.hold", "hotels.hold"}


def test_duplicates_dropped_and_races_lost_are_counted(fleet: SandboxFleet) -> None:
    # given a saga whose first command this process handles as a worker would
    saga = fleet.client().start("trip", TRIP_INPUT, key="counted").saga_id
    stale = fleet.repo.load_history(saga)
    [command, *_] = commands_due(list(stale.events), saga, fleet.clock())
    metrics = fleet.metrics.registry
    # when the command is handled, then handled again (a duplicate message)
    assert fleet.executor.handle(command).verdict == "executed"
    assert fleet.executor.handle(command).verdict == "dropped"
    # and something is appended from the saga as it stood before (another writer got there)
    for attempt in fleet.orchestrator.attempts(saga, known=stale):
        with attempt:
            fleet.orchestrator.commit(
                attempt.loaded, [CancelRequested(at=fleet.clock(), actor="ops", reason="counted")])
    # then one claim, one call, one drop and one lost race are counted
    value = metrics.get_sample_value
    assert value("sagafleet_worker_step_commands_total", {"outcome": "executed"}) == 1
    assert value("sagafleet_worker_step_commands_total", {"outcome": "dropped"}) == 1
    assert value("sagafleet_worker_claims_total",
                 {"tool": command_tool(fleet, saga, command), "kind": "forward"}) == 1
    assert value("sagafleet_worker_races_lost_total") == 1
