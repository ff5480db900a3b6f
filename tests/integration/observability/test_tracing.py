"""OpenTelemetry on a real fleet run: one trace per saga start, a span per step attempt and
compensation with their attributes, the context carried through Celery messages, the
trace id in every event's metadata and in ``sagafleet audit``; and nothing at all without
the otel extra."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fleet_harness import SandboxFleet, WorkerProcesses, settle
from principal_support import issue_token
from trip_inputs import TRIP_INPUT

from projections import ProjectionContext, audit
from saga_core.contracts import SagaStatus
from sagafleet.cli import main
from sagafleet.exit_codes import ExitCode

pytestmark = pytest.mark.integration

RUN = Path(__file__).with_name("otel_fleet_run.py")
ROOT = Path(__file__).resolve().parents[3]


def traced_run(database: str, broker: str) -> dict[str, Any]:
    """The sagas, states and spans of ``otel_fleet_run.py`` (its own process)."""
    done = subprocess.run([sys.executable, str(RUN), database, broker], cwd=ROOT,  # noqa: S603
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_saga_is_one_trace_from_its_start_through_every_step(
        database: str, broker: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # given tracing on with the in-memory exporter, when a completing trip and one whose
    # itinerary bounces run on a real fleet
    run = traced_run(database, broker)
    assert run["states"] == {"completed": "COMPLETED", "bounced": "COMPENSATED"}
    spans = run["spans"]
    by_id = {s["span_id"]: s for s in spans}

    def of_saga(saga_id: str, name: str) -> list[dict[str, Any]]:
        return [s for s in spans if s["name"] == name
                and s["attributes"].get("sagafleet.saga_id") == saga_id]

    traces = {}
    for case, saga_id in run["sagas"].items():
        # then each start is the root of a trace of its own
        [start] = of_saga(saga_id, "saga.start")
        assert start["parent_id"] is None
        assert start["attributes"]["sagafleet.outcome"] == "started"
        trace = traces[case] = start["trace_id"]
        # and every step attempt is a span in that trace, with saga, step, tool, attempt
        # and outcome, under the Celery worker's span of the message that carried it
        steps = of_saga(saga_id, "saga.step")
        assert {s["attributes"]["sagafleet.step_id"] for s in steps} == {
            "hold_flight", "hold_hotel", "capture_payment", "send_itinerary"}
        for step in steps:
            assert step["trace_id"] == trace
            assert step["attributes"]["sagafleet.attempt"] == 1
            assert step["attributes"]["sagafleet.kind"] == "forward"
            parent = by_id[step["parent_id"]]
            assert parent["name"] == "run/sagafleet.step" and parent["kind"] == "CONSUMER"
        # and the message was published inside the start (its context in the headers)
        published = by_id[by_id[steps[0]["parent_id"]]["parent_id"]]
        assert published["name"] == "apply_async/sagafleet.step"
        assert published["kind"] == "PRODUCER" and published["trace_id"] == trace
        # and the SQL of the run is in the same trace (psycopg's instrumentation)
        assert any(s["attributes"].get("db.system") == "postgresql" and s["trace_id"] == trace
                   for s in spans)
    outcomes = {s["attributes"]["sagafleet.tool"]: s["attributes"]["sagafleet.outcome"]
                for s in of_saga(run["sagas"]["bounced"], "saga.step")}
    assert outcomes == {"flights.hold": "succeeded", "hotels.hold": "succeeded",
                        "payments.capture": "succeeded", "email.send_itinerary": "failed"}
    # and each compensation is a span of its own, in the bounced saga's trace
    compensations = of_saga(run["sagas"]["bounced"], "saga.compensation")
    assert sorted(s["attributes"]["sagafleet.tool"] for s in compensations) == [
        "flights.release", "hotels.release", "payments.refund"]
    assert all(s["trace_id"] == traces["bounced"] and
               s["attributes"]["sagafleet.outcome"] == "succeeded" for s in compensations)
    assert not of_saga(run["sagas"]["completed"], "saga.compensation")
    assert traces["completed"] != traces["bounced"]
    # and a start given no trace records its OpenTelemetry trace as its lineage trace
    for case, saga_id in run["sagas"].items():
        assert run["lineage_traces"][saga_id] == traces[case]
    # and a start whose lineage names the agent's trace joins it: the start span's parent
    # is the agent's (remote) span, and its steps are in that trace
    joined = run["joined"]
    [start] = of_saga(joined, "saga.start")
    assert start["trace_id"] == run["lineage_traces"][joined] == "8f1c2b3a4d5e6f708192a3b4c5d6e7f8"
    assert start["parent_id"] is not None and start["parent_id"] not in by_id
    assert {s["trace_id"] for s in of_saga(joined, "saga.step")} == {start["trace_id"]}

    # and every event of each saga carries its trace id, which audit shows
    with ProjectionContext.connect(database) as ctx:
        for case, saga_id in run["sagas"].items():
            report = audit(ctx, saga_id, tenant="default")
            assert report.timeline
            assert {e.trace_id for e in report.timeline} == {traces[case]}
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", database)
    monkeypatch.setenv("SAGAFLEET_TOKEN", issue_token(database, "eve", ["auditor"]))
    capsys.readouterr()
    assert main(["audit", run["sagas"]["bounced"]]) == ExitCode.OK
    assert f"trace={traces['bounced']}" in capsys.readouterr().out
    assert main(["audit", run["sagas"]["bounced"], "--json"]) == ExitCode.OK
    timeline = json.loads(capsys.readouterr().out)["timeline"]
    assert {entry["trace_id"] for entry in timeline} == {traces["bounced"]}


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans OpenTelemetry's console exporter wrote among a process's other output."""
    decoder, spans = json.JSONDecoder(), []
    for start in (i for i in range(len(text)) if text.startswith("{\n", i)
                  and (i == 0 or text[i - 1] == "\n")):
        try:
            found, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict) and "context" in found and "name" in found:
            spans.append(found)
    return spans


def test_sagafleet_worker_traces_when_sagafleet_otel_is_set(
        fleet: SandboxFleet, workers: WorkerProcesses) -> None:
    # given a real `sagafleet worker` with SAGAFLEET_OTEL=1, exporting to its console
    workers.start(1, extra_env={"SAGAFLEET_OTEL": "1", "OTEL_TRACES_EXPORTER": "console"})
    # when a saga is started (by an untraced process) and runs on it
    saga = fleet.client().start("trip", TRIP_INPUT, key="worker-traced").saga_id
    assert settle(fleet, [saga]) == {saga: SagaStatus.COMPLETED}
    workers.stop()  # a warm shutdown flushes the spans
    spans = console_spans((workers.log_dir / "worker-0.log").read_text())
    # then the worker exported a span per step attempt, from the service sagafleet-worker
    steps = [s for s in spans if s["name"] == "saga.step"
             and s["attributes"].get("sagafleet.saga_id") == saga]
    assert sorted(s["attributes"]["sagafleet.tool"] for s in steps) == [
        "email.send_itinerary", "flights.hold", "hotels.hold", "payments.capture"]
    assert {s["resource"]["attributes"]["service.name"] for s in steps} == {"sagafleet-worker"}
    # and Celery's and psycopg's spans beside them
    assert any(s["name"] == "run/sagafleet.step" for s in spans)
    assert any(s["attributes"].get("db.system") == "postgresql" for s in spans)
    # and the events the worker appended carry the trace ids of its spans
    traced = {s["context"]["trace_id"].removeprefix("0x") for s in steps}
    with ProjectionContext.connect(fleet.config.database_url) as ctx:
        written = {e.trace_id for e in audit(ctx, saga, tenant="default").timeline}
    assert traced <= written


def test_without_the_otel_extra_tracing_is_absent_and_free() -> None:
    # given a process in which opentelemetry cannot be imported (the extra not installed)
    code = textwrap.dedent("""
        import sys
        sys.modules["opentelemetry"] = None  # what an absent package looks like to import
        from application.telemetry import tracing
        assert not tracing.tracing_available()
        # then a span is the shared do-nothing object, and no metadata is added
        with tracing.operation_span("saga.step", saga_id="s", tool="t") as span:
            tracing.set_outcome(span, "succeeded")
        assert span is tracing._NO_SPAN
        with tracing.saga_start_span(saga_id="s") as start:
            assert start is tracing._NO_SPAN
        assert tracing.trace_metadata() == {}
        # and tracing stays off unless asked; asked, it names what to install
        assert tracing.init_tracing(False, "worker") is False
        try:
            tracing.init_tracing(True, "worker")
        except tracing.TracingUnavailable as exc:
            assert "sagafleet[otel]" in str(exc)
        else:
            raise AssertionError("tracing started without OpenTelemetry")
        assert not any(name.startswith("opentelemetry") and sys.modules[name] is not None
                       for name in sys.modules)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,  # noqa: S603
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
