"""A traced fleet run, in a process of its own (run by ``test_tracing.py``).

The OpenTelemetry SDK's tracer provider and the Celery and psycopg instrumentations are
process-wide and cannot be undone cleanly, so the test runs them here rather than in the
pytest process: tracing on with the SDK's in-memory exporter, a real fleet (PostgreSQL,
Redis) with an embedded Celery worker thread on the fleet's own app, two trips started
through the client, waited for by reading the log (no sweeper: every message is one the
fleet published itself). Prints one JSON document: the sagas, their final states, and every
finished span.

Usage: python otel_fleet_run.py DATABASE_URL BROKER_URL
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# fleet_harness and trip_inputs, after the project's packages (tests/integration/events must
# never shadow the events package).
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parent), str(HERE.parent.parent)]

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from application.telemetry.tracing import init_tracing  # noqa: E402

DEADLINE_S = 120.0
JOINED_TRACE = "8f1c2b3a4d5e6f708192a3b4c5d6e7f8"


def main(database: str, broker: str) -> None:
    exporter = InMemorySpanExporter()
    # Before the first connection: psycopg's instrumentation wraps connect().
    assert init_tracing(True, "test", exporter=exporter)
    from celery.contrib.testing.worker import start_worker
    from fleet_harness import build_fleet
    from trip_inputs import BOUNCING_INPUT, TRIP_INPUT

    fleet = build_fleet(database, broker)
    try:
        with start_worker(fleet.celery, pool="threads", concurrency=2,
                          perform_ping_check=False, loglevel="WARNING"):
            client = fleet.client()
            sagas = {"completed": client.start("trip", TRIP_INPUT, key="traced-ok").saga_id,
                     "bounced": client.start("trip", BOUNCING_INPUT, key="traced-bounce").saga_id}
            states = {name: _settled(fleet, saga_id) for name, saga_id in sagas.items()}
            # A start whose lineage names the agent's own trace: the saga joins it.
            joined = client.start("trip", TRIP_INPUT, key="traced-joined",
                                  lineage={"trace_id": JOINED_TRACE}).saga_id
            _settled(fleet, joined)
        lineage = {saga_id: fleet.repo.load_history(saga_id).events[0].lineage.trace_id
                   for saga_id in (*sagas.values(), joined)}
    finally:
        fleet.close()
    spans = [
        {
            "name": span.name,
            "kind": span.kind.name,
            "trace_id": format(span.context.trace_id, "032x"),
            "span_id": format(span.context.span_id, "016x"),
            "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
            "attributes": dict(span.attributes or {}),
            "links": [format(link.context.trace_id, "032x") for link in span.links],
        }
        for span in exporter.get_finished_spans()
    ]
    print(json.dumps({"sagas": sagas, "states": states, "spans": spans, "joined": joined,
                      "lineage_traces": lineage}, default=str))


def _settled(fleet, saga_id: str) -> str:  # type: ignore[no-untyped-def]
    """The saga's status once terminal (the worker's own messages drive it there)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        status = fleet.repo.load(saga_id).state.status
        if status.is_terminal:
            return str(status)
        time.sleep(0.1)
    raise SystemExit(f"saga {saga_id} did not finish in {DEADLINE_S}s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
