"""Hostile input at every entry of a real fleet: client calls, the CLI, raw broker messages.

Each gets a typed error (a SagaError) or is dead-lettered; no worker crashes; nothing is
half-written (no saga stream without SagaStarted, no definition row for a rejected one);
and a valid saga afterwards still completes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import psycopg
import pytest
from celery import Celery
from fleet_harness import settle, worker_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu import Connection, Exchange, Producer
from principal_support import person
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from saga_core.errors import SagaError
from sagafleet.example_sagas import trip_definition
from sagafleet.exit_codes import ExitCode

ODD_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", " ", "trip ", "TRIP", "trip\x00", "'; DROP TABLE eventstore.events;--",
                     "a" * 300, "../trip", "${input.amount}", "\u202etrip", "default",
                     "trip\ud800"]),
)
ODD_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ODD_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ODD_TEXT, inner, max_size=3),
    max_leaves=6,
)
ODD_INPUTS = st.one_of(
    ODD_VALUES,
    st.dictionaries(st.sampled_from(sorted(TRIP_INPUT)), ODD_VALUES, max_size=7).map(
        lambda edits: {**TRIP_INPUT, **edits}),
)
HOSTILE = settings(max_examples=40, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])


def _half_written(database: str) -> dict[str, int]:
    """Saga streams whose first event is not SagaStarted, and definition rows."""
    with psycopg.connect(database) as conn:
        orphans = conn.execute(
            "SELECT count(*) FROM eventstore.events"
            " WHERE stream_version = 1 AND stream_id LIKE 'saga-%%'"
            "   AND event_type <> 'SagaStarted'").fetchone()
        headless = conn.execute(
            "SELECT count(DISTINCT stream_id) FROM eventstore.events e WHERE NOT EXISTS ("
            " SELECT 1 FROM eventstore.events f WHERE f.stream_id = e.stream_id"
            "   AND f.stream_version = 1)").fetchone()
        definitions = conn.execute("SELECT count(*) FROM eventstore.definitions").fetchone()
    return {"orphans": orphans[0], "headless": headless[0], "definitions": definitions[0]}


def test_hostile_client_calls_are_refused_typed_and_leave_nothing_half_written(fleet, database):
    before = _half_written(database)
    accepted: list[str] = []

    @HOSTILE
    @given(definition=st.sampled_from(["trip"]) | ODD_TEXT, data=ODD_INPUTS,
           key=st.none() | ODD_TEXT, tenant=ODD_TEXT, version=st.none() | st.integers(-3, 3))
    def start(definition, data, key, tenant, version):
        try:
            # A hostile tenant is refused when the client is made; a hostile call when made.
            client = fleet.client(tenant=tenant or "default")
            started = client.start(definition, data, key=key, version=version)
        except SagaError:
            return
        accepted.append(started.saga_id)
        assert fleet.repo.load_history(started.saga_id).events[0].event_type == "SagaStarted"

    start()
    after = _half_written(database)
    assert after == before  # no orphan or headless stream, no new definition row


def test_hostile_definitions_and_plans_are_refused_typed_and_never_stored(fleet, database):
    trip = trip_definition().model_dump(mode="json")
    client = person(fleet, "hostile", ("agent", "admin"))
    stored = _half_written(database)["definitions"]
    accepted = 0

    @HOSTILE
    @given(edits=st.dictionaries(st.sampled_from(sorted(trip)), ODD_VALUES, min_size=1,
                                 max_size=3), name=ODD_TEXT, plan=ODD_VALUES)
    def register(edits, name, plan):
        nonlocal accepted
        try:
            client.register_definition({**trip, **edits, "name": f"h-{name}"[:60]})
            accepted += 1
        except SagaError:
            pass
        try:
            client.submit_plan(plan if not isinstance(plan, dict) else {"actions": [plan]})
            accepted += 1
        except SagaError:
            pass

    register()
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT count(*) FROM eventstore.definitions").fetchone()[0]
    assert rows <= stored + accepted  # a refused definition or plan left no row


def _raw_publish(broker: str, body: bytes, content_type: str, task: str, queue: str) -> None:
    """Publish bytes as a Celery (protocol 2) message, bypassing every serializer."""
    with Connection(broker) as conn:
        producer = Producer(conn)
        producer.publish(
            body, exchange=Exchange(queue, type="direct"), routing_key=queue,
            serializer=None, content_type=content_type, content_encoding="utf-8",
            headers={"task": task, "id": str(uuid.uuid4()), "lang": "py", "argsrepr": "",
                     "kwargsrepr": "", "origin": "hostile"},
            declare=[],
        )


def test_hostile_broker_messages_are_dead_lettered_and_the_fleet_keeps_going(
    fleet, database, broker, workers
):
    (worker,) = workers.start(1)
    done = fleet.client().start("trip", TRIP_INPUT, key="done-before")
    settle(fleet, [done.saga_id])
    agent = Celery("hostile", broker=broker, set_as_current=False)
    agent.conf.update(task_serializer="json", accept_content=["json"])
    steps, commands = "sagafleet.steps", "sagafleet.commands"

    def step(*args, **kwargs):
        agent.send_task("sagafleet.step", args=list(args), kwargs=kwargs, queue=steps)

    # wrong shapes and types, huge payloads (dead-lettered with a reason)
    step("only-one")
    step(None, None, None, None)
    step(done.saga_id, "hold_flight", "sideways", 1)
    step(done.saga_id, "hold_flight", "forward", "1")
    step(done.saga_id, "hold_flight", "forward", True)
    step(done.saga_id, "hold_flight", "forward", 1, extra="kw")
    step("x" * 20_000, "hold_flight", "forward", 1)
    agent.send_task("sagafleet.commands.start_saga", args=["positional"], queue=commands)
    agent.send_task("sagafleet.commands.start_saga", queue=commands,
                    kwargs={"definition": "trip", "input": TRIP_INPUT, "tenant": ["x"]})
    agent.send_task("sagafleet.commands.cancel_saga", queue=commands,
                    kwargs={"saga_id": "no-such-saga", "tenant": "default"})
    agent.send_task("sagafleet.commands.submit_plan", queue=commands,
                    kwargs={"plan": {"actions": [{"tool": "shell.exec"}]}})
    dead_lettered = 11
    # unknown saga, unknown step, replays of an old message (harmless: dropped by the log)
    step("no-such-saga", "hold_flight", "forward", 1)
    step(done.saga_id, "no_such_step", "forward", 1)
    step(done.saga_id, "hold_flight", "forward", 1)
    step(done.saga_id, "capture_payment", "compensation", 1)
    # not JSON at all, and an unknown task name (refused by Celery before any task runs)
    _raw_publish(broker, b"\x80\x04not json{", "application/json", "sagafleet.step", steps)
    agent.send_task("sagafleet.no_such_task", args=[1], queue=steps)
    # when a valid saga follows all of it
    after = fleet.client().start("trip", TRIP_INPUT, key="after-hostile")
    assert settle(fleet, [after.saga_id])[after.saga_id] is SagaStatus.COMPLETED
    # then the worker is the same process, alive
    assert worker.poll() is None
    # and every malformed message was kept with its reason
    with psycopg.connect(database) as conn:
        letters = conn.execute("SELECT task, reason FROM fleet.dead_letters").fetchall()
    assert len(letters) == dead_lettered, letters
    assert all(reason for _, reason in letters)
    # and nothing was written for the unknown saga, nor to the settled one
    assert _half_written(database)["orphans"] == 0
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM eventstore.events WHERE stream_id LIKE"
                            " '%%no-such-saga%%'").fetchone() == (0,)
    assert fleet.repo.load(done.saga_id).version == settle_version(fleet, done.saga_id)


def settle_version(fleet, saga_id: str) -> int:
    """The version at which the saga finished (its SagaFinished event)."""
    events = fleet.repo.load_history(saga_id).events
    return next(i + 1 for i, e in enumerate(events) if e.event_type == "SagaFinished")


HOSTILE_ARGV = [
    [],
    ["start"],
    ["start", "trip", "--input", "not json"],
    ["start", "trip", "--input", "[1, 2]"],
    ["start", "trip", "--input", json.dumps({**TRIP_INPUT, "nights": -1})],
    ["start", "no-such-saga", "--input", "{}", "--json"],
    ["start", "trip", "--input", json.dumps(TRIP_INPUT), "--key", "k" * 500],
    ["status", "'; DROP TABLE eventstore.events; --"],
    ["status", "x" * 10_000, "--json"],
    ["approve", "no-such-saga", "capture_payment", "--token-file", ""],
    ["deny", "no-such-saga", "capture_payment"],
    ["cancel", "\x01\x02"],
    ["--no-such-flag"],
    ["worker", "--concurrency", "0"],
]


def test_hostile_cli_arguments_get_a_named_exit_code_never_a_traceback(database, broker):
    env = worker_env(database, broker)
    procs = [subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", *argv], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for argv in HOSTILE_ARGV]
    named = {int(code) for code in ExitCode}
    for argv, proc in zip(HOSTILE_ARGV, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in named - {0}, (argv, proc.returncode, err[-500:])
        assert "Traceback" not in out + err, (argv, err[-2000:])
    assert _half_written(database)["orphans"] == 0


def test_malformed_client_arguments_are_refused_by_name_before_any_write(fleet, database):
    from application.client import InvalidRequest

    client = person(fleet, "hostile", ("agent", "approver", "operator"))
    saga = client.start("trip", TRIP_INPUT, key="hostile-args").saga_id
    with psycopg.connect(database) as conn:
        before = conn.execute("SELECT count(*) FROM eventstore.events").fetchone()
    calls = [
        (lambda: client.start(5, TRIP_INPUT), "definition name must be a string"),
        (lambda: client.start("trip\x00", TRIP_INPUT), "definition name: .* NUL"),
        (lambda: client.start("trip", TRIP_INPUT, key="k\ud800"), "idempotency key: .* surrogate"),
        (lambda: client.start("trip", TRIP_INPUT, reason=5), "reason must be a string"),
        (lambda: client.start("trip", TRIP_INPUT, version="1"), "version must be a positive int"),
        (lambda: client.cancel(saga, reason=["x"]), "reason must be a string"),
        (lambda: client.approve(saga, None), "step id must be a string"),
        (lambda: client.approve(saga, "charge_card", kind="sideways"), "step kind must be one"),
        (lambda: client.deny(saga, "charge_card", reason="r" * 10_001),
         "reason is 10001 characters; the limit is 10000"),
        (lambda: client.resolve(saga, "retry", reason="ok", evidence={"x": "\x00"}),
         "evidence: .* NUL"),
        (lambda: fleet.client(tenant="t\ud800"), "tenant: .* surrogate"),
        (lambda: fleet.client(actor=""), "actor must not be empty"),
    ]
    for call, message in calls:
        with pytest.raises(InvalidRequest, match=message):
            call()
    # Text the log cannot hold, inside the input, is a field problem like any other.
    for bad in ("a\x00b@example.com", "a\udc00b@example.com"):
        with pytest.raises(SagaError, match=r"input\.customer_email: \[not_json\]"):
            client.start("trip", {**TRIP_INPUT, "customer_email": bad})
    # And a saga id that cannot exist is not found, not a database error.
    with pytest.raises(SagaError, match="no saga"):
        client.status("saga\x00")
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM eventstore.events").fetchone() == before
