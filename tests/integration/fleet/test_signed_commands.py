"""Agent commands over Celery act only when signed by a live key of the tenant they act for:
valid ones act once as the key's principal, hostile ones start nothing and wait in the dead
letters with their refusal (real PostgreSQL, Redis and ``sagafleet worker``)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from principal_support import token_for
from signed_agent import agent_signer, bare_celery, send
from trip_inputs import TRIP_INPUT, by_secret_ref

from projections import ProjectionContext, collect_platform_metrics
from saga_core.access.roles import AUDITOR_ROLE
from saga_core.engine.events import CancelRequested
from sagafleet.agent import CommandSigner
from workers.fleet import Fleet
from workers.tasks import keyless_start_key

# Needs an approval before the capture: it waits until the test cancels it.
WAITS_FOR_APPROVAL = {**TRIP_INPUT, "amount": 250_000}
ROOM_PLAN = {"goal": "a room", "actions": [
    {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]}
HOUR_S = 3600.0


def _rows(database: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(query, params).fetchall()


def _sagas_started(database: str, tenant: str) -> int:
    return int(_rows(database, "SELECT count(*) FROM eventstore.events WHERE event_type ="
                     " 'SagaStarted' AND tenant_id = %s", tenant)[0][0])


def _cancels(database: str, saga_id: str) -> int:
    return int(_rows(database, "SELECT count(*) FROM eventstore.events WHERE stream_id = %s"
                     " AND event_type = 'CancelRequested'", f"saga-{saga_id}")[0][0])


def _wait_for_saga(fleet: Fleet, tenant: str, key: str) -> str:
    client = fleet.client(tenant=tenant)
    deadline = time.monotonic() + 60
    while (saga := client.find(key)) is None:
        assert time.monotonic() < deadline, f"no saga was started with key {key!r}"
        time.sleep(0.1)
    return saga.saga_id


def _wait_for_letters(database: str, count: int) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + 60
    while True:
        letters = _rows(database, "SELECT task, task_id, refusal, error_kind, reason, message"
                        " FROM fleet.dead_letters ORDER BY id")
        if len(letters) >= count or time.monotonic() > deadline:
            return letters
        time.sleep(0.2)


def test_signed_start_cancel_and_plan_act_once_each_as_the_keys_principal(
        fleet, database, broker, workers):
    # given a worker, and an agent principal of acme holding a signing key
    workers.start(1)
    agent = bare_celery(broker)
    signer = agent_signer(fleet, "acme", "travel-agent")
    waiting = fleet.client(tenant="acme").start("trip", WAITS_FOR_APPROVAL, key="waits")
    # when it signs a keyed start, a keyless start, a cancel and a plan, and each message is
    # delivered twice (the same message: the same task id, as after a killed worker)
    by_ref = fleet.client(tenant="acme")
    keyed = signer.start_saga("trip", by_secret_ref(by_ref), key="signed-1", reason="asked")
    keyless = signer.start_saga("trip", by_secret_ref(by_ref))
    cancel = signer.cancel_saga(waiting.saga_id, reason="plans changed")
    plan = signer.submit_plan(ROOM_PLAN, name="signed-room")
    for signed in (keyed, keyless, cancel, plan):
        send(agent, signed, send(agent, signed))
    # then the keyed start started one saga, recorded as the key's principal, in its tenant
    saga_id = _wait_for_saga(fleet, "acme", "signed-1")
    started = fleet.repo.load_history(saga_id).events[0]
    assert started.actor == "travel-agent" and started.reason == "asked"
    assert fleet.client(tenant="other").find("signed-1") is None
    # and the keyless one is keyed by its signed command, not by its Celery task id
    command_id = json.loads(keyless[1]["envelope"])["command_id"]
    _wait_for_saga(fleet, "acme", keyless_start_key(signer.kid, command_id))
    # and the cancel was recorded once, by the principal
    deadline = time.monotonic() + 60
    while _cancels(database, waiting.saga_id) == 0:
        assert time.monotonic() < deadline, "the cancel never took effect"
        time.sleep(0.1)
    cancelled = [e for e in fleet.repo.load_history(waiting.saga_id).events
                 if isinstance(e, CancelRequested)]
    assert len(cancelled) == 1 and cancelled[0].actor == "travel-agent"
    # and the plan registered once, by the principal
    deadline = time.monotonic() + 60
    while not (plans := _rows(database, "SELECT version, registered_by FROM"
                              " eventstore.definitions WHERE name = 'signed-room'")):
        assert time.monotonic() < deadline, "the plan was never registered"
        time.sleep(0.1)
    assert plans == [(1, "travel-agent")]
    # and, all of it handled, two sagas started besides the waiting one, nothing refused
    assert _sagas_started(database, "acme") == 1 + 2
    assert _rows(database, "SELECT count(*) FROM fleet.dead_letters") == [(0,)]


def _forged_by_another_key(signed: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The same envelope and kid, signed by a key the directory never saw."""
    task, kwargs = signed
    raw = Ed25519PrivateKey.generate().sign(kwargs["envelope"].encode())
    return task, {**kwargs, "signature": base64.urlsafe_b64encode(raw).rstrip(b"=").decode()}


def _altered(signed: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The envelope edited after signing (the amount raised), the signature kept."""
    task, kwargs = signed
    envelope = json.loads(kwargs["envelope"])
    envelope["args"]["input"]["amount"] = 99_999_999
    return task, {**kwargs, "envelope": json.dumps(envelope)}


def _cli(database: str, broker: str, *args: str,
         token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_BROKER_URL": broker}
    if token is not None:
        env["SAGAFLEET_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env,  # noqa: S603
                          capture_output=True, text=True, timeout=120, check=False)


def test_unsigned_forged_replayed_expired_and_other_tenant_commands_start_nothing(
        fleet, database, broker, workers):
    # given a worker, acme's agent with a live key, and a saga of acme waiting for approval
    workers.start(1)
    agent = bare_celery(broker)
    acme = agent_signer(fleet, "acme", "travel-agent")
    waiting = fleet.client(tenant="acme").start("trip", WAITS_FOR_APPROVAL, key="waits")
    by_ref = fleet.client(tenant="acme")

    def start(key: str, signer: CommandSigner = acme) -> tuple[str, dict[str, Any]]:
        return signer.start_saga("trip", by_secret_ref(by_ref), key=key)

    # and a command that took effect (its message is what an attacker copies from Redis)
    original = start("original")
    send(agent, original)
    _wait_for_saga(fleet, "acme", "original")
    keyless = acme.start_saga("trip", by_secret_ref(by_ref))
    send(agent, keyless)
    keyless_id = json.loads(keyless[1]["envelope"])["command_id"]
    _wait_for_saga(fleet, "acme", keyless_start_key(acme.kid, keyless_id))
    # and a revoked key, an auditor's key, and another tenant's agent
    revoked = agent_signer(fleet, "acme", "old-agent")
    fleet.principals.revoke_signing_key(revoked.kid)
    auditor = agent_signer(fleet, "acme", "bob", roles=(AUDITOR_ROLE,), kind="person")
    evil = agent_signer(fleet, "evil", "evil-agent")
    unknown = CommandSigner("sk_" + "A" * 22, Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    late = agent_signer(fleet, "acme", "travel-agent", clock=lambda: time.time() - HOUR_S)
    early = agent_signer(fleet, "acme", "travel-agent", clock=lambda: time.time() + HOUR_S)
    evil_claims_acme = evil.sign("sagafleet.commands.start_saga", {
        "definition": "trip", "input": by_secret_ref(by_ref), "key": "claimed",
        "tenant": "acme"})
    cancel_as_start = acme.cancel_saga(waiting.saga_id)

    # when each hostile message arrives
    hostile: dict[str, tuple[tuple[str, dict[str, Any]], str, str]] = {
        "unsigned": (("sagafleet.commands.start_saga",
                      {"definition": "trip", "input": by_secret_ref(by_ref), "key": "unsigned"}),
                     "unsigned", "unauthenticated"),
        "unsigned naming a tenant": (("sagafleet.commands.start_saga", {
            "definition": "trip", "input": by_secret_ref(by_ref), "key": "named",
            "tenant": "acme", "actor": "travel-agent"}), "identity_in_message", "forbidden"),
        "altered": (_altered(start("altered")), "bad_signature", "unauthenticated"),
        "another key": (_forged_by_another_key(start("another-key")), "bad_signature",
                        "unauthenticated"),
        "unknown kid": (start("unknown-kid", unknown), "unknown_key", "unauthenticated"),
        "revoked kid": (start("revoked-kid", revoked), "unknown_key", "unauthenticated"),
        "replayed": (original, "replayed", "unauthenticated"),
        "replayed keyless": (keyless, "replayed", "unauthenticated"),
        "expired": (start("expired", late), "expired", "unauthenticated"),
        "not yet valid": (start("early", early), "not_yet_valid", "unauthenticated"),
        "another tenant claimed": (evil_claims_acme, "identity_in_message", "forbidden"),
        "not permitted": (start("auditor", auditor), "not_permitted", "forbidden"),
        "wrong task": (("sagafleet.commands.start_saga", cancel_as_start[1]), "wrong_task",
                       "unauthenticated"),
    }
    sent = {send(agent, signed): name for name, (signed, _, _) in hostile.items()}
    # and another tenant's valid key asks to cancel acme's saga
    evil_cancel = send(agent, evil.cancel_saga(waiting.saga_id, reason="mine now"))

    # then every one is dead-lettered with its refusal and kind
    letters = _wait_for_letters(database, len(hostile) + 1)
    assert len(letters) == len(hostile) + 1, letters
    by_task_id = {letter[1]: letter for letter in letters}
    for task_id, name in sent.items():
        _, refusal, kind = hostile[name]
        _, _, got_refusal, got_kind, reason, _ = by_task_id[task_id]
        assert (got_refusal, got_kind) == (refusal, kind), (name, reason)
        assert reason.startswith(f"{refusal}: "), (name, reason)
    # and the other tenant's cancel found no saga of its own tenant to cancel
    assert by_task_id[evil_cancel][3] == "not_found"
    # and each letter belongs to the tenant whose key's signature verified (even when the
    # command was refused after that), and a message that proves no tenant to none
    proven = {"unsigned": None, "unsigned naming a tenant": None, "altered": None,
              "another key": None, "unknown kid": None, "revoked kid": None,
              "replayed": "acme", "replayed keyless": "acme", "expired": "acme",
              "not yet valid": "acme", "another tenant claimed": "evil",
              "not permitted": "acme", "wrong task": "acme"}
    tenants = dict(_rows(database, "SELECT task_id, tenant FROM fleet.dead_letters"))
    assert {name: tenants[task_id] for task_id, name in sent.items()} == proven
    assert tenants[evil_cancel] == "evil"
    # and nothing was started, for acme or evil, and acme's saga was not cancelled
    assert _sagas_started(database, "acme") == 1 + 2  # waiting, original, keyless
    assert _sagas_started(database, "evil") == 0
    assert _cancels(database, waiting.saga_id) == 0
    for key in ("unsigned", "named", "altered", "another-key", "unknown-kid", "revoked-kid",
                "expired", "early", "claimed", "auditor"):
        assert fleet.client(tenant="acme").find(key) is None, key
    # and acme's operator sees the refusals of acme's commands in `sagafleet dead-letters`,
    # the fleet operator those that prove no tenant, evil's operator evil's
    def refusals(token: str) -> list[str]:
        listed = _cli(database, broker, "dead-letters", "--json", token=token)
        assert listed.returncode == 0, listed.stderr
        return sorted((letter["refusal"] or "-") for letter in json.loads(listed.stdout))

    def expected(tenant: str | None) -> list[str]:
        return sorted(hostile[name][1] for name, owner in proven.items() if owner == tenant)

    olga = token_for(fleet, "olga", ("operator",), tenant="acme")
    assert refusals(olga) == expected("acme")
    assert refusals(token_for(fleet, "pat", ("fleet_operator",), tenant="fleet")) == expected(
        None)
    assert refusals(token_for(fleet, "eve", ("operator",), tenant="evil")) == sorted(
        [*expected("evil"), "-"])
    text = _cli(database, broker, "dead-letters", token=olga).stdout
    assert "[unauthenticated: replayed]" in text and "[forbidden: not_permitted]" in text
    replayed = next(letter for letter in json.loads(
        _cli(database, broker, "dead-letters", "--json", token=olga).stdout)
        if letter["refusal"] == "replayed")
    shown = _cli(database, broker, "dead-letters", "show", str(replayed["id"]),
                 token=olga).stdout
    assert '"command_id"' in shown and "envelope: " in shown
    # and the metrics count refusals by kind
    # (the platform's view: no tenant is proven to own a refused command)
    with ProjectionContext.connect(database) as ctx:
        letters = collect_platform_metrics(ctx).dead_letters
    assert letters is not None
    refused = letters.refused
    assert refused["replayed"] == 2 and refused["bad_signature"] == 2
    assert refused["unknown_key"] == 2 and refused["identity_in_message"] == 2


def test_a_replay_after_the_window_is_refused_as_expired_once_its_nonce_is_forgotten(
        fleet, database, broker, workers):
    # given a command that took effect, issued long enough ago that it expired since
    workers.start(1)
    agent = bare_celery(broker)
    then = time.time() - 600.0
    signer = agent_signer(fleet, "acme", "travel-agent", lifetime_s=60, clock=lambda: then)
    signed = signer.start_saga("trip", by_secret_ref(fleet.client(tenant="acme")), key="old")
    # (the worker took it in its window: the nonce is recorded directly, as it would be)
    with psycopg.connect(database) as conn:
        conn.execute("INSERT INTO fleet.command_nonces (kid, command_id, task_id, task,"
                     " kept_until) VALUES (%s, %s, %s, %s, now() - interval '1 minute')",
                     (signer.kid, json.loads(signed[1]["envelope"])["command_id"],
                      str(uuid.uuid4()), signed[0]))
    # when the sweeper forgets expired nonces
    from workers.sweeper import Sweeper

    assert Sweeper(fleet).sweep().expired_nonces == 1
    assert _rows(database, "SELECT count(*) FROM fleet.command_nonces") == [(0,)]
    # and a copy of the message arrives
    send(agent, signed)
    # then the window alone refuses it
    ((_, _, refusal, kind, _, _),) = _wait_for_letters(database, 1)
    assert (refusal, kind) == ("expired", "unauthenticated")
    assert fleet.client(tenant="acme").find("old") is None
