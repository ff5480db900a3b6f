"""No agent command is lost, none acts twice, and what can never succeed waits in the dead
letters for an operator (list, show, requeue, discard on real servers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
from celery import Celery
from principal_support import authenticated, token_for
from prometheus_client.parser import text_string_to_metric_families
from signed_agent import agent_signer, send
from trip_inputs import TRIP_INPUT, by_secret_ref

from projections import ProjectionContext, collect_metrics, collect_platform_metrics
from projections.metrics import DeadLetterMetrics
from projections.prometheus import scrape
from sagafleet.agent import CommandSigner
from sagafleet.example_sagas import trip_definition
from sagafleet.exit_codes import ExitCode
from workers.fleet import Fleet
from workers.tasks import START_SAGA, keyless_start_key

COMMANDS = "sagafleet.commands"
ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}
LONGER_ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 3, "guest_email": "a@b.c"}}]}
# Needs an approval before the capture: it cannot finish before the test cancels it.
WAITS_FOR_APPROVAL = {**TRIP_INPUT, "amount": 250_000}


def _agent(broker: str) -> Celery:
    # What an agent in any language does: name the task, send JSON keyword arguments.
    app = Celery("agent", broker=broker, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


def _send(agent: Celery, task: str, task_id: str | None = None, *, args: Any = (),
          **kwargs: Any) -> str:
    task_id = task_id or str(uuid.uuid4())
    agent.send_task(task, args=list(args), kwargs=kwargs, queue=COMMANDS, task_id=task_id)
    return task_id


def _wait_for_saga(fleet: Fleet, tenant: str, key: str, timeout: float = 60.0) -> str:
    client = fleet.client(tenant=tenant)
    deadline = time.monotonic() + timeout
    while (saga := client.find(key)) is None:
        assert time.monotonic() < deadline, f"no saga was started with key {key!r}"
        time.sleep(0.1)
    return saga.saga_id


def _barrier(agent: Celery, fleet: Fleet, signer: CommandSigner, tenant: str) -> None:
    """Once a start queued behind everything sent so far has run, the one worker has handled
    every command before it (one queue, first in, first out)."""
    key = f"barrier-{uuid.uuid4().hex[:8]}"
    send(agent, signer.start_saga("trip", by_secret_ref(fleet.client(tenant=tenant)), key=key))
    _wait_for_saga(fleet, tenant, key)


def _keyless_key(signer: CommandSigner, signed: tuple[str, dict[str, Any]]) -> str:
    return keyless_start_key(signer.kid, json.loads(signed[1]["envelope"])["command_id"])


def _scalar(database: str, query: str, *params: Any) -> Any:
    with psycopg.connect(database) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _sagas_started(database: str, tenant: str) -> int:
    return int(_scalar(database, "SELECT count(*) FROM eventstore.events"
                       " WHERE event_type = 'SagaStarted' AND tenant_id = %s", tenant))


def test_every_command_delivered_twice_acts_once(fleet, database, broker, workers):
    # given one worker, and a saga that waits for an approval (so a cancel has work to do)
    workers.start(1)
    agent = _agent(broker)
    tenant = "twice"
    signer = agent_signer(fleet, tenant)
    waiting = fleet.client(tenant=tenant).start("trip", WAITS_FOR_APPROVAL, key="waits")
    # when every kind of signed command is delivered twice (the same message: the same
    # task id)
    by_ref = fleet.client(tenant=tenant)
    sent = {
        "keyed": signer.start_saga("trip", by_secret_ref(by_ref), key="k-1"),
        "keyless": signer.start_saga("trip", by_secret_ref(by_ref)),
        "cancel": signer.cancel_saga(waiting.saga_id, reason="plans changed"),
        "plan": signer.submit_plan(ROOM_PLAN),
    }
    for signed in sent.values():
        send(agent, signed, send(agent, signed))
    # and a different plan, also without a name
    send(agent, signer.submit_plan(LONGER_ROOM_PLAN))
    _barrier(agent, fleet, signer, tenant)
    # then each start started one saga: the keyless one keyed by its signed command
    _wait_for_saga(fleet, tenant, "k-1")
    _wait_for_saga(fleet, tenant, _keyless_key(signer, sent["keyless"]))
    assert _sagas_started(database, tenant) == 1 + 2 + 1  # waiting, keyed, keyless, barrier
    # and the cancel was recorded once
    assert _scalar(database, "SELECT count(*) FROM eventstore.events WHERE stream_id = %s"
                   " AND event_type = 'CancelRequested'", f"saga-{waiting.saga_id}") == 1
    # and each plan registered once, under a name of its own
    with psycopg.connect(database) as conn:
        plans = conn.execute("SELECT name, version FROM eventstore.definitions"
                             " WHERE name LIKE 'agent-plan-%%'").fetchall()
    assert len(plans) == 2 and {version for _, version in plans} == {1}
    # and nothing was dead-lettered
    assert _scalar(database, "SELECT count(*) FROM fleet.dead_letters") == 0


def test_a_worker_killed_while_handling_commands_loses_none(fleet, database, broker, workers):
    # given a consuming worker (two threads: its broker loop keeps running while a command
    # waits) whose unacknowledged messages come back after 3 s
    short = {"SAGAFLEET_VISIBILITY_TIMEOUT_SECONDS": "3"}
    (victim,) = workers.start(1, extra_env=short, args=("--concurrency", "2"))
    agent = _agent(broker)
    tenant = "killed"
    signer = agent_signer(fleet, tenant)
    _barrier(agent, fleet, signer, tenant)
    # and a definition it has never read
    fleet.client_for(authenticated(fleet, "admin", ["admin"], tenant=tenant)).register_definition(
        {**trip_definition().model_dump(mode="json"), "name": "killed-trip"})
    with psycopg.connect(database) as held, psycopg.connect(database, autocommit=True) as look:
        # and the definitions table held, so the worker stops reading it for a start, before
        # anything of the start is written or sent
        held.execute("LOCK TABLE eventstore.definitions IN ACCESS EXCLUSIVE MODE")
        for n in range(2):
            send(agent, signer.start_saga("killed-trip",
                                          by_secret_ref(fleet.client(tenant=tenant)),
                                          key=f"kill-{n}"))
        keyless = signer.start_saga("killed-trip", by_secret_ref(fleet.client(tenant=tenant)))
        send(agent, keyless)
        deadline = time.monotonic() + 60
        while not look.execute(
                "SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid)"
                " WHERE NOT granted AND query LIKE 'SELECT d.hash FROM eventstore.definitions%%'"
                ).fetchone()[0]:
            assert time.monotonic() < deadline, "the worker never started on a command"
            time.sleep(0.05)
        # when the worker is SIGKILLed there, and the table let go
        victim.kill()
        victim.wait()
        held.rollback()
    # and a replacement worker comes up
    workers.start(1, extra_env=short)
    # then every command takes effect, once
    for n in range(2):
        _wait_for_saga(fleet, tenant, f"kill-{n}")
    _wait_for_saga(fleet, tenant, _keyless_key(signer, keyless))
    assert _sagas_started(database, tenant) == 1 + 3  # the barrier, and the three
    assert _scalar(database, "SELECT count(*) FROM fleet.dead_letters") == 0


def _cli(database: str, broker: str):  # type: ignore[no-untyped-def]
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker}

    def run(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        """The command, acting with ``token`` (SAGAFLEET_TOKEN) when one is given."""
        acting = env if token is None else {**env, "SAGAFLEET_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "sagafleet", *args],  # noqa: S603
                              env=acting, capture_output=True, text=True, timeout=120,
                              check=False)

    return run


def test_commands_that_can_never_succeed_wait_in_the_dead_letters_for_an_operator(
    fleet, database, broker, workers
):
    workers.start(1)
    agent = _agent(broker)
    run = _cli(database, broker)
    tenant = "letters"
    signer = agent_signer(fleet, tenant)
    # given a start of a definition nobody registered yet, a malformed one, an invalid one
    later = signer.start_saga("later-trip", by_secret_ref(fleet.client(tenant=tenant)),
                              key="later")
    later_id = send(agent, later)
    _send(agent, START_SAGA, args=["positional"])
    send(agent, signer.sign(START_SAGA, {"definition": "trip"}))  # no input
    _barrier(agent, fleet, signer, tenant)
    # and operators of the tenant, and a fleet operator (the malformed command proves no
    # tenant: the letter is the fleet operator's alone)
    ada, bob = (token_for(fleet, name, ["operator"], tenant=tenant) for name in ("ada", "bob"))
    pat = token_for(fleet, "pat", ["fleet_operator"], tenant="fleet")
    # when the tenant's operator lists the dead letters
    listed = run("dead-letters", "--json", token=ada)
    assert listed.returncode == ExitCode.OK, listed.stderr
    letters = json.loads(listed.stdout)
    assert [(letter["error_kind"], letter["tenant"]) for letter in letters] == [
        ("not_found", tenant), ("invalid_input", tenant)]
    unknown, no_input = (letter["id"] for letter in letters)
    assert "later-trip" in letters[0]["reason"]
    assert "missing argument 'input'" in letters[1]["reason"]
    # and the fleet operator lists them
    (stray,) = json.loads(run("dead-letters", "--json", token=pat).stdout)
    assert (stray["error_kind"], stray["tenant"]) == ("invalid_input", None)
    assert "keyword arguments only" in stray["reason"]
    malformed = stray["id"]
    # then each keeps the whole message, as sent
    shown = json.loads(run("dead-letters", "show", str(unknown), "--json", token=ada).stdout)
    assert shown["kwargs"] == later[1] and shown["task_id"] == later_id
    assert shown["status"] == "open" and shown["task"] == START_SAGA
    assert "later-trip" in run("dead-letters", "show", str(unknown), token=ada).stdout

    # when the missing definition is registered and the letter requeued
    fleet.client_for(authenticated(fleet, "admin", ["admin"], tenant=tenant)).register_definition(
        {**trip_definition().model_dump(mode="json"), "name": "later-trip"})
    requeued = run("dead-letters", "requeue", str(unknown), "--json", token=ada)
    assert requeued.returncode == ExitCode.OK, requeued.stderr
    assert json.loads(requeued.stdout)["changed"]
    # then the saga starts, under the key the agent gave (the same message: its command id
    # is held by its own task id, so it is no replay)
    _wait_for_saga(fleet, tenant, "later")
    # and a second requeue does nothing, and says so
    again = run("dead-letters", "requeue", str(unknown), token=bob)
    assert again.returncode == ExitCode.OK and "already requeued by ada" in again.stdout

    # when the malformed one is discarded by the fleet operator
    discarded = run("dead-letters", "discard", str(malformed), "--reason", "a broken agent",
                    "--json", token=pat)
    assert discarded.returncode == ExitCode.OK, discarded.stderr
    letter = json.loads(discarded.stdout)["letter"]
    assert letter["status"] == "discarded" and letter["resolved_by"] == "pat"
    assert letter["resolution"] == "a broken agent"
    # then it cannot be requeued any more, and only the invalid one stays open
    assert run("dead-letters", "requeue", str(malformed), token=pat).returncode == (
        ExitCode.CONFLICT)
    assert [letter["id"] for letter in json.loads(
        run("dead-letters", "--json", token=ada).stdout)] == [no_input]
    # and an unknown id is not found
    missing = run("dead-letters", "show", "999999", "--json", token=ada)
    assert missing.returncode == ExitCode.NOT_FOUND
    assert json.loads(missing.stdout)["error"] == "DeadLetterNotFound"
    # and the platform's metrics count them: three recorded, one still open, none refused
    # for its credentials; the tenant's own stats count its two
    with ProjectionContext.connect(database) as ctx:
        assert collect_platform_metrics(ctx).dead_letters == DeadLetterMetrics(3, 1, {})
        assert collect_metrics(ctx, tenant=tenant).dead_letters == DeadLetterMetrics(2, 1, {})
        exposition = scrape(ctx)
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:  # every tenant's series (and no tenant's) added up
            samples[s.name] = samples.get(s.name, 0.0) + s.value
    assert samples["sagafleet_dead_letters_open"] == 1
    assert samples["sagafleet_dead_letters_recorded_total"] == 3
