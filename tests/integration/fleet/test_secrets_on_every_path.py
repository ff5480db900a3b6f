"""A secret input, on every entry path, ends up nowhere in clear: not in the broker, not in
the log or any table, not in any process's log file.

The paths: the Python client (a value), a signed Celery command from an agent (a ref
from ``sagafleet secrets put``, the message delivered twice), MCP over HTTP
(``put_secret`` then ``start_saga`` with the ref, and ``start_saga`` with a value), and a
Celery command holding a raw value, which is refused. Real PostgreSQL and Redis, real
``sagafleet worker`` (at DEBUG, Celery's most talkative), ``sweeper`` and ``mcp --http``
processes, each logging to a file of the test's directory.

The guarantee for the refused raw value: the agent put it in Redis, so Redis held it until
the worker took the message; once the message is dead-lettered and acknowledged no key of
the broker holds it, and PostgreSQL and the logs never did (the dead letter withholds it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psycopg
from celery import Celery
from fleet_harness import redis_client, worker_env
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from principal_support import issue_token
from psycopg import sql
from signed_agent import agent_signer, send
from trip_inputs import TRIP_INPUT

from saga_core.contracts import SagaStatus
from sagafleet.processes import spawn_sagafleet, stop_processes
from sagafleet.sandbox import ledger_for_saga
from workers.dead_letters.withholding import SIGNATURE_WITHHELD

# Distinctive values, one per path, so that a leak says where it came from.
SECRETS = {
    "python": "tok_PYCLIENT_9f3b1c77e2_leakcheck",
    "celery": "tok_CELERYREF_4d8a0e91b5_leakcheck",
    "mcp_ref": "tok_MCPREF_7c2e5f13a0_leakcheck",
    "mcp_raw": "tok_MCPRAW_1b9d6a48c3_leakcheck",
    "refused": "tok_RAWBROKER_5e0f2b7d94_leakcheck",
    "unused": "tok_UNUSEDREF_8a3c1e6f20_leakcheck",
    "misnamed": "tok_MISNAMED_3f7a9c0d51_leakcheck",
}
TENANT = "acme"


def _wait_for(what: str, condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _broker_dump(broker: str) -> bytes:
    """Every key of the broker's database and everything it holds, whatever its type."""
    client = redis_client(broker)
    chunks: list[bytes] = []
    for key in client.scan_iter("*"):
        chunks.append(key)
        kind = client.type(key)
        if kind == b"string":
            chunks.append(client.get(key) or b"")
        elif kind == b"list":
            chunks.extend(client.lrange(key, 0, -1))
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                chunks.extend((field, value))
        elif kind == b"set":
            chunks.extend(client.smembers(key))
        elif kind == b"zset":
            chunks.extend(client.zrange(key, 0, -1))
        elif kind == b"none":
            continue  # emptied between SCAN and TYPE (a queue a worker drained): holds nothing
        else:
            raise AssertionError(f"broker key {key!r} has a type the scan does not read: {kind!r}")
    client.close()
    return b"\n".join(chunks)


def _database_dump(database: str) -> dict[str, str]:
    """Every row of every table of every schema (the event log included), as text."""
    dump: dict[str, str] = {}
    with psycopg.connect(database) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND table_type = 'BASE TABLE'"
        ).fetchall()
        for schema, table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table))
            dump[f"{schema}.{table}"] = "\n".join(r[0] for r in conn.execute(query).fetchall())
    return dump


def _leaks(database: str, broker: str, logs: Path) -> list[str]:
    """Where any of the secrets is found in clear."""
    found = []
    redis_bytes = _broker_dump(broker)
    tables = _database_dump(database)
    assert tables["eventstore.events"], "the event log was scanned and holds the sagas"
    log_files = sorted(logs.glob("*.log"))
    assert len(log_files) >= 3, "the worker, sweeper and MCP server logs were scanned"
    for path, value in SECRETS.items():
        if value.encode() in redis_bytes:
            found.append(f"{path}: in the broker")
        found += [f"{path}: in table {name}" for name, rows in tables.items() if value in rows]
        found += [f"{path}: in {log.name}" for log in log_files
                  if value in log.read_text(errors="replace")]
    return found


def _bare_celery(broker: str) -> Celery:
    # What an agent in any language does: name the task, send JSON keyword arguments.
    app = Celery("agent", broker=broker, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


def _secrets_put(env: dict[str, str], value: str, *ttl: str) -> dict[str, Any]:
    """``sagafleet secrets put`` with the value on stdin, as an agent of TENANT; its JSON
    answer."""
    token = issue_token(env["SAGAFLEET_DATABASE_URL"], "cli-agent", ["agent"], tenant=TENANT)
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", "secrets", "put", "--json", *ttl],
        input=value.encode(), env={**env, "SAGAFLEET_TOKEN": token}, capture_output=True,
        check=True, timeout=60)
    assert value.encode() not in done.stdout + done.stderr
    return dict(json.loads(done.stdout))


def _mcp_calls(url: str, token: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Over MCP, as the agent of ``token``: put a secret and start with its ref, and start
    with a raw value."""

    async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await session.call_tool(tool, arguments)
        document = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert not result.is_error, document
        return dict(document)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                streamable_http_client(url, http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            put = await call(session, "put_secret", value=SECRETS["mcp_ref"])
            by_ref = await call(session, "start_saga", definition="trip",
                                input={**TRIP_INPUT, "card_token": put["secret_ref"]},
                                idempotency_key="mcp-ref", reason="over MCP, by ref")
            raw = await call(session, "start_saga", definition="trip",
                             input={**TRIP_INPUT, "card_token": SECRETS["mcp_raw"]},
                             idempotency_key="mcp-raw", reason="over MCP, by value")
            return put, by_ref, raw

    return anyio.run(scenario)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_secret_is_left_in_clear_after_sagas_on_every_path_and_a_refused_command(
    fleet, database, broker, tmp_path
):
    # given a worker (DEBUG), a sweeper and an MCP server over HTTP, each logging to a file
    env = worker_env(database, broker)
    env["SAGAFLEET_HOME"] = str(tmp_path / "home")
    port = _free_port()
    procs = [
        spawn_sagafleet(["worker", "--loglevel", "DEBUG"], env, tmp_path / "worker.log"),
        spawn_sagafleet(["sweeper"], env, tmp_path / "sweeper.log"),
        spawn_sagafleet(["mcp", "--http", f"127.0.0.1:{port}"], env, tmp_path / "mcp.log"),
    ]
    try:
        _run_every_path(fleet, database, broker, env, port, procs, tmp_path)
    finally:
        stop_processes(procs)
    # then, with every process stopped and its log flushed, no secret is anywhere in clear
    assert _leaks(database, broker, tmp_path) == []


def _run_every_path(fleet, database, broker, env, port, procs, logs) -> None:  # type: ignore[no-untyped-def]
    client = fleet.client(tenant=TENANT, actor="py-agent")
    agent = _bare_celery(broker)
    sagas: dict[str, str] = {}

    # when the Python client starts a trip with the card token as a value
    sagas["python"] = client.start(
        "trip", {**TRIP_INPUT, "card_token": SECRETS["python"]}, key="py").saga_id

    # and a Celery agent deposits its token with the CLI and sends the ref, twice (a
    # redelivery: the second start finds the ref spent and lands on the same saga)
    put = _secrets_put(env, SECRETS["celery"])
    signer = agent_signer(fleet, TENANT, "celery-agent")
    command = signer.start_saga("trip", {**TRIP_INPUT, "card_token": put["secret_ref"]},
                                key="celery-ref", reason="by ref over the broker")
    send(agent, command, send(agent, command))
    sagas["celery"] = _wait_for("the Celery start", lambda: client.find("celery-ref")).saga_id

    # and an MCP agent puts a secret and starts with its ref, and starts with a value
    _wait_for("the MCP server", lambda: _listening(port, procs[2]))
    mcp_token = fleet.principals.add(TENANT, "mcp-bot", "agent", ["agent"]).token
    _, by_ref, raw = _mcp_calls(f"http://127.0.0.1:{port}/mcp", mcp_token)
    sagas["mcp_ref"], sagas["mcp_raw"] = by_ref["saga_id"], raw["saga_id"]

    # and an agent sends a raw token over the broker, and deposits one it never uses
    send(agent, signer.start_saga(
        "trip", {**TRIP_INPUT, "card_token": SECRETS["refused"]}, key="celery-raw"))
    _secrets_put(env, SECRETS["unused"], "--ttl", "1")
    # and one misspells the task's name (Celery drops the message; its report must not
    # show what it carried)
    send(agent, signer.sign("sagafleet.commands.start_sagas", {
        "definition": "trip", "input": {**TRIP_INPUT, "card_token": SECRETS["misnamed"]}}))

    # then every started trip completes, the tool having received the token
    for path, saga_id in sagas.items():
        _wait_for(f"the {path} saga to complete",
                  lambda s=saga_id: fleet.repo.load(s).state.status is SagaStatus.COMPLETED)
        started = fleet.repo.load_history(saga_id).events[0]
        assert started.input["card_token"] == {"$secret": "card_token"}
        # the redelivered Celery start made no second saga and charged nothing twice
        assert ledger_for_saga(fleet.sandbox_pool, saga_id).captured == TRIP_INPUT["amount"]
    assert client.find("celery-raw") is None

    # and the raw token's command is dead-lettered, naming the field and what to do instead
    letter = _wait_for("the dead letter", lambda: _dead_letters(database))
    assert len(letter) == 1
    body, reason = letter[0]
    assert "input.card_token" in reason and "$secret_ref" in reason and "put_secret" in reason
    envelope = json.loads(body["kwargs"]["envelope"])
    assert envelope["args"]["input"]["card_token"] == "[secret withheld]"
    assert body["kwargs"]["signature"] == SIGNATURE_WITHHELD  # an altered envelope

    # and once acknowledged the message is gone from the broker; the sweeper has purged the
    # finished sagas' secrets and the unused deposit once it expired
    _wait_for("the refused and misnamed messages to leave the broker",
              lambda: not any(SECRETS[m].encode() in _broker_dump(broker)
                              for m in ("refused", "misnamed")))
    _wait_for("the worker to report the misnamed task",
              lambda: "unregistered task of type 'sagafleet.commands.start_sagas'"
              in (logs / "worker.log").read_text(errors="replace"))
    _wait_for("the vault to empty", lambda: _vault_rows(database) == (0, 0))


def _listening(port: int, proc: subprocess.Popen[bytes]) -> bool:
    import socket

    assert proc.poll() is None, "the MCP server exited"
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def _dead_letters(database: str) -> list[tuple[dict[str, Any], str]]:
    with psycopg.connect(database) as conn:
        return conn.execute("SELECT message, reason FROM fleet.dead_letters").fetchall()


def _vault_rows(database: str) -> tuple[int, int]:
    """(secrets of sagas, deposits still holding a value)."""
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM fleet.secrets),"
            " (SELECT count(*) FROM fleet.secret_refs WHERE value IS NOT NULL)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])
