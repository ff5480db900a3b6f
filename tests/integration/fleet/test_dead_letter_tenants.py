"""Each dead letter records the tenant its message proves, at the moment a worker keeps it:
the tenant of the key whose signature verified (even when the command was refused after
that), the tenant of the saga a malformed step message names; and no tenant (NULL) for a
message that proves none — unsigned, forged, signed by an unknown key, naming a tenant of its
own, or a step message naming no saga. What an unproven message *says* is never believed
(real PostgreSQL, Redis and ``sagafleet worker`` processes)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from signed_agent import agent_signer, bare_celery, send
from trip_inputs import TRIP_INPUT

from saga_core.access.roles import AUDITOR_ROLE
from sagafleet.agent import CommandSigner
from workers.celery_app import QUEUE_STEPS, STEP_TASK

WAITS_FOR_APPROVAL = {**TRIP_INPUT, "amount": 250_000}


def _letters(database: str, count: int) -> dict[str, tuple[str | None, str | None]]:
    """task id -> (tenant, refusal) of the dead letters, once ``count`` are kept."""
    deadline = time.monotonic() + 60
    while True:
        with psycopg.connect(database) as conn:
            rows = conn.execute("SELECT task_id, tenant, refusal, message"
                                " FROM fleet.dead_letters").fetchall()
        if len(rows) >= count or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(rows) == count, rows
    # a step message's letter keeps no Celery task id: name it by the saga it names
    return {task_id or message["args"][0]: (tenant, refusal)
            for task_id, tenant, refusal, message in rows}


def _forger() -> CommandSigner:
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    return CommandSigner("sk_" + "f" * 32, pem)


def test_each_letter_records_the_tenant_its_message_proves(fleet, database, broker, workers):
    # given a worker, an agent of acme and an auditor of globex (no role to start) with keys,
    # and a saga of acme
    workers.start(1)
    agent = bare_celery(broker)
    acme = agent_signer(fleet, "acme", "booker")
    globex_auditor = agent_signer(fleet, "globex", "watcher", roles=(AUDITOR_ROLE,),
                                  kind="person")
    acme_saga = fleet.client(tenant="acme").start("trip", WAITS_FOR_APPROVAL, key="w").saga_id

    sent: dict[str, str] = {}
    # when acme signs a start of a definition nobody registered (fails once accepted)
    sent["accepted-then-failed"] = send(agent, acme.start_saga("no-such-definition", {}))
    # and globex's auditor signs a start (its signature holds; its roles refuse it)
    sent["not-permitted"] = send(agent, globex_auditor.start_saga("trip", TRIP_INPUT))
    # and acme's signed command is sent twice under two task ids (the second is a replay)
    replayed = acme.cancel_saga(acme_saga, reason="first")
    send(agent, replayed)
    sent["replayed"] = send(agent, replayed)
    # and someone signs with acme's key id but a key of its own (a forgery)
    forged_kid = acme.kid
    forger = _forger()
    task, kwargs = forger.cancel_saga(acme_saga)
    sent["forged"] = send(agent, (task, {**kwargs, "kid": forged_kid}))
    # and an unknown key signs, and an unsigned command names acme as its tenant
    sent["unknown-key"] = send(agent, forger.cancel_saga(acme_saga))
    sent["unsigned"] = send(agent, ("sagafleet.commands.cancel_saga",
                                    {"saga_id": acme_saga, "tenant": "acme", "actor": "x"}))
    # and two malformed step messages: one names acme's saga, one names no saga
    agent.send_task(STEP_TASK, args=[acme_saga, "hold_flight"], queue=QUEUE_STEPS)
    agent.send_task(STEP_TASK, args=["no-such-saga", "hold_flight"], queue=QUEUE_STEPS)

    # then each letter belongs to the tenant its message proved, or to none
    letters = _letters(database, 8)  # (the first copy of the replayed command acted)
    assert letters.pop(sent["accepted-then-failed"]) == ("acme", None)
    assert letters.pop(sent["not-permitted"]) == ("globex", "not_permitted")
    assert letters.pop(sent["replayed"]) == ("acme", "replayed")
    assert letters.pop(sent["forged"]) == (None, "bad_signature")
    assert letters.pop(sent["unknown-key"]) == (None, "unknown_key")
    assert letters.pop(sent["unsigned"]) == (None, "identity_in_message")
    assert letters.pop(acme_saga) == ("acme", None)
    assert letters.pop("no-such-saga") == (None, None)
    assert letters == {}


def _backfilled(database: str, rows: list[dict[str, Any]]) -> list[str | None]:
    """The tenants migration 0013 derives for letters kept before it, in ``rows`` order."""
    migration = (Path(__file__).resolve().parents[3] / "workers" / "migrations" /
                 "0013_dead_letter_tenants.sql").read_text()
    statements = [part for part in migration.split(";") if "UPDATE" in part]
    with psycopg.connect(database, autocommit=True) as conn:
        ids = []
        for row in rows:
            found = conn.execute(
                "INSERT INTO fleet.dead_letters (task, task_id, message, reason, error_kind,"
                " refusal) VALUES (%s, %s, %s, 'r', 'invalid_input', %s) RETURNING id",
                (row["task"], row.get("task_id"), json.dumps(row["message"]),
                 row.get("refusal"))).fetchone()
            assert found is not None
            ids.append(found[0])
        for statement in statements:  # the migration's own backfill, run again on them
            conn.execute(statement)
        tenants = dict(conn.execute("SELECT id, tenant FROM fleet.dead_letters"
                                    " WHERE id = ANY(%s)", (ids,)).fetchall())
    return [tenants[i] for i in ids]


def test_the_migration_derives_the_tenant_of_letters_kept_before_it(fleet, database):
    # given an acme key, a saga of acme, and letters as they were kept before tenants
    signer = agent_signer(fleet, "acme", "booker")
    saga = fleet.client(tenant="acme").start("trip", WAITS_FOR_APPROVAL, key="old").saga_id
    task, kwargs = signer.cancel_saga(saga)
    rows = [
        {"task": task, "message": {"args": [], "kwargs": kwargs}},  # failed once accepted
        {"task": task, "message": {"args": [], "kwargs": kwargs}, "refusal": "expired"},
        {"task": task, "message": {"args": [], "kwargs": kwargs}, "refusal": "bad_signature"},
        {"task": task, "message": {"args": ["x"], "kwargs": kwargs}},  # refused before
        {"task": task, "message": {"args": [], "kwargs": {"tenant": "acme"}}},  # claimed
        {"task": STEP_TASK, "message": {"args": [saga, 1], "kwargs": {}}},
        {"task": STEP_TASK, "message": {"args": ["nobody"], "kwargs": {}}},
    ]
    # when the migration's backfill runs over them
    # then only what a verified signature or an existing saga proves is attributed
    assert _backfilled(database, rows) == ["acme", "acme", None, None, None, "acme", None]
