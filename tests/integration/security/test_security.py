"""Security: tenant isolation, approvals bound to identity/hash/scope/expiry, no pickle,
parameterised SQL (a lint over the code, plus injection-looking input stored verbatim)."""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from fleet_harness import events_of, settle, shifted_fleet, worker_env
from kombu import Connection, Exchange, Producer
from principal_support import authenticated, person, token_for
from trip_inputs import TRIP_INPUT

from events.saga_log.streams import SagaNotFound
from saga_core.contracts import SagaStatus
from saga_core.engine.events import ApprovalGranted, SagaStarted
from saga_core.errors import ApprovalAltered, ApprovalExpired, ApprovalReplayed
from sagafleet.exit_codes import ExitCode
from sagafleet.sandbox import ledger_for_saga

ROOT = Path(__file__).resolve().parents[3]
EXPENSIVE = {**TRIP_INPUT, "amount": 250_000}



def _awaiting_approval(fleet, client, saga_id):
    settle(fleet, [saga_id], parked=lambda loaded: bool(
        client.status(loaded.saga_id).pending_approvals))
    return client.status(saga_id).pending_approvals[0]


# -- tenants --------------------------------------------------------------------------------


def test_one_tenant_cannot_read_approve_cancel_or_resolve_anothers_saga(
    fleet, database, broker, workers
):
    workers.start(1)
    acme = fleet.client(tenant="acme", actor="acme-agent")
    saga_id = acme.start("trip", EXPENSIVE, key="isolated").saga_id
    pending = _awaiting_approval(fleet, acme, saga_id)
    # an authenticated person of another tenant, holding every role there
    every_role = ("agent", "approver", "operator")
    intruder = person(fleet, "mallory", every_role, tenant="globex")
    # the other tenant sees nothing, and every command is refused as "no such saga"
    assert intruder.find("isolated") is None
    for attempt in (
        lambda: intruder.status(saga_id),
        lambda: intruder.approve(saga_id, "capture_payment", action_hash=pending["action_hash"]),
        lambda: intruder.deny(saga_id, "capture_payment", reason="mine now"),
        lambda: intruder.cancel(saga_id, reason="mine now"),
        lambda: intruder.resolve(saga_id, "resume", reason="mine now"),
    ):
        with pytest.raises(SagaNotFound):
            attempt()
    # nor through the CLI acting for that tenant
    env = {**worker_env(database, broker), "SAGAFLEET_TENANT": "globex",
           "SAGAFLEET_TOKEN": token_for(fleet, "mallory", every_role, tenant="globex")}
    for argv in (["status", saga_id], ["approve", saga_id, "capture_payment"],
                 ["cancel", saga_id]):
        done = subprocess.run([sys.executable, "-m", "sagafleet", *argv, "--json"],  # noqa: S603
                              env=env, capture_output=True, text=True, check=False)
        assert done.returncode == ExitCode.NOT_FOUND, (argv, done.stdout, done.stderr)
    # and the saga is untouched: same events, still waiting for acme's human
    assert acme.status(saga_id).pending_approvals == [pending]
    assert all(getattr(e, "actor", "acme-agent") != "mallory" for e in events_of(fleet, saga_id))
    # every event row and the sweeper's row carry the tenant
    person(fleet, "acme-ops", tenant="acme").approve(saga_id, "capture_payment")
    assert settle(fleet, [saga_id])[saga_id] is SagaStatus.COMPLETED
    with psycopg.connect(database) as conn:
        tenants = conn.execute("SELECT DISTINCT tenant_id FROM eventstore.events"
                               " WHERE stream_id = %s", (f"saga-{saga_id}",)).fetchall()
        tracked = conn.execute("SELECT DISTINCT tenant FROM fleet.redeliveries r"
                               " JOIN fleet.active_sagas a USING (saga_id)").fetchall()
    assert tenants == [("acme",)]
    assert tracked in ([], [("acme",)])


def test_approval_is_bound_to_identity_hash_scope_and_expiry(fleet, database, broker, workers):
    workers.start(1)
    client = fleet.client()
    saga_id = client.start("trip", EXPENSIVE, key="bound").saga_id
    pending = _awaiting_approval(fleet, client, saga_id)
    assert pending["scope"] and pending["expires_at"]
    # an altered approval (another action hash) is refused
    alice = authenticated(fleet, "alice")
    with pytest.raises(ApprovalAltered):
        fleet.client_for(alice).approve(saga_id, "capture_payment", action_hash="0" * 64)
    # an approval arriving after the request expired is refused
    later = shifted_fleet(database, broker, timedelta(hours=2))
    try:
        with pytest.raises(ApprovalExpired):
            later.client_for(alice).approve(saga_id, "capture_payment",
                                            action_hash=pending["action_hash"])
    finally:
        later.close()
    # the grant records who approved which action; a replayed click changes nothing
    fleet.client_for(alice).approve(saga_id, "capture_payment",
                                    action_hash=pending["action_hash"])
    version = fleet.repo.load(saga_id).version
    fleet.client_for(alice).approve(saga_id, "capture_payment",
                                    action_hash=pending["action_hash"])
    grants = [e for e in events_of(fleet, saga_id) if isinstance(e, ApprovalGranted)]
    assert len(grants) == 1
    assert grants[0].approver == "alice" and grants[0].action_hash == pending["action_hash"]
    assert settle(fleet, [saga_id])[saga_id] is SagaStatus.COMPLETED
    assert fleet.repo.load(saga_id).version > version
    assert ledger_for_saga(fleet.sandbox_pool, saga_id).captures == 1


def test_a_denied_approval_cannot_be_replayed_as_a_grant(fleet, workers):
    workers.start(1)
    client = fleet.client()
    saga_id = client.start("trip", EXPENSIVE, key="denied").saga_id
    pending = _awaiting_approval(fleet, client, saga_id)
    person(fleet, "bob").deny(saga_id, "capture_payment", reason="no")
    with pytest.raises(ApprovalReplayed):
        person(fleet, "alice").approve(saga_id, "capture_payment",
                                       action_hash=pending["action_hash"])
    assert settle(fleet, [saga_id])[saga_id] is SagaStatus.COMPENSATED
    assert ledger_for_saga(fleet.sandbox_pool, saga_id).captures == 0


# -- no pickle ------------------------------------------------------------------------------


def test_celery_accepts_json_only(fleet):
    conf = fleet.celery.conf
    assert list(conf.accept_content) == ["json"]
    assert conf.task_serializer == conf.result_serializer == conf.event_serializer == "json"


class _Detonator:
    """Unpickling this runs a shell command that leaves a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_message_is_refused_without_executing(fleet, database, broker, workers,
                                                        tmp_path):
    (worker,) = workers.start(1)
    marker = tmp_path / "pickle-ran"
    body = pickle.dumps(((_Detonator(marker),), {}, {}))
    with Connection(broker) as conn:
        Producer(conn).publish(
            body, exchange=Exchange("sagafleet.steps", type="direct"),
            routing_key="sagafleet.steps", serializer=None,
            content_type="application/x-python-serialize", content_encoding="binary",
            headers={"task": "sagafleet.step", "id": str(uuid.uuid4()), "lang": "py"},
            declare=[])
    # a valid saga queued behind it completes, so the worker has seen and refused it
    saga = fleet.client().start("trip", TRIP_INPUT, key="after-pickle")
    assert settle(fleet, [saga.saga_id])[saga.saga_id] is SagaStatus.COMPLETED
    assert not marker.exists(), "a pickled message was deserialized"
    assert worker.poll() is None


# -- SQL ------------------------------------------------------------------------------------

_SQL_WORDS = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "CREATE ", "DROP ", "ALTER ", " WHERE ")


def _only_constants(query: ast.JoinedStr) -> bool:
    """An f-string interpolating nothing but module constants (UPPER_CASE names)."""
    values = [v.value for v in query.values if isinstance(v, ast.FormattedValue)]
    return all(isinstance(v, ast.Name) and v.id.isupper() for v in values)


def _formatted_sql(path: Path, root: Path = ROOT) -> list[str]:
    """Calls of .execute/.executemany/sql.SQL whose query is built with f-strings, % or +
    from anything but module constants."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in ("execute", "executemany", "SQL", "copy"):
            continue
        query = node.args[0]
        text = ast.unparse(query)
        built = (isinstance(query, ast.JoinedStr) and not _only_constants(query)) or (
            isinstance(query, ast.BinOp) and isinstance(query.op, ast.Mod | ast.Add)
            and any(isinstance(n, ast.JoinedStr | ast.Name | ast.Call | ast.Attribute)
                    for n in (query.left, query.right))
        ) or (isinstance(query, ast.Call) and isinstance(query.func, ast.Attribute)
              and query.func.attr == "format" and isinstance(query.func.value, ast.Constant))
        if built and (name == "SQL" or any(w in text.upper() for w in _SQL_WORDS)
                      or isinstance(query, ast.JoinedStr)):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {text[:100]}")
    return found


def test_no_sql_is_built_by_string_formatting():
    offenders = []
    # The product's rooms (benchmark scripts name throw-away databases they create).
    for room in ("saga_core", "events", "workers", "projections", "sagafleet"):
        for path in sorted((ROOT / room).rglob("*.py")):
            offenders += _formatted_sql(path)
    assert offenders == [], "SQL must be parameterised or composed with psycopg.sql:\n" + \
        "\n".join(offenders)


def test_the_sql_lint_would_catch_a_formatted_query(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(conn, x):\n    conn.execute(f"SELECT * FROM t WHERE a = {x}")\n'
                   '    conn.execute("DELETE FROM t WHERE a = %s" % x)\n')
    assert len(_formatted_sql(bad, tmp_path)) == 2


INJECTIONS = [
    "x'); DROP TABLE eventstore.events; --",
    "' OR '1'='1",
    "${input.card_token}",
    "robert'); DELETE FROM sandbox_payments.charges; --",
    "\\x00\\'; SELECT pg_sleep(10); --",
]


def test_injection_looking_input_is_stored_verbatim(fleet, database, workers):
    workers.start(1)
    client = fleet.client(tenant="acme'; --", actor="agent\"; DROP TABLE x; --")
    sagas = []
    held = []
    for index, text in enumerate(INJECTIONS):
        data = {**TRIP_INPUT, "flight_id": text, "hotel_id": text,
                "customer_email": f"guest{index}@example.com"}
        sagas.append((client.start("trip", data, key=text + str(index), reason=text), data))
        # The same text as a recipient is no address the gate can read: a person is asked
        # (``${input.card_token}`` is a valid dot-atom local part: an internal address).
        if "$" not in text:
            odd = {**TRIP_INPUT, "customer_email": f"{text}@example.com"}
            held.append(client.start("trip", odd, key="to " + text + str(index)).saga_id)
    settle(fleet, [s.saga_id for s, _ in sagas])
    settle(fleet, held, parked=lambda loaded: bool(
        client.status(loaded.saga_id).pending_approvals))
    for saga_id in held:
        shown = client.status(saga_id)
        assert len(shown.pending_approvals) == 1, (shown.status, shown.steps)
        (request,) = shown.pending_approvals
        assert request["step_id"] == "send_itinerary"
    for started, data in sagas:
        first = events_of(fleet, started.saga_id)[0]
        assert isinstance(first, SagaStarted)
        assert first.input["flight_id"] == data["flight_id"]
        assert first.input["customer_email"] == data["customer_email"]
        assert first.reason == data["flight_id"] and first.tenant == "acme'; --"
        assert client.status(started.saga_id).status == "COMPLETED"
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM eventstore.events").fetchone()[0] > 0
        assert conn.execute("SELECT count(*) FROM sandbox_payments.charges").fetchone()[0] == \
            len(INJECTIONS) + len(held)  # the held sagas captured before their itinerary
