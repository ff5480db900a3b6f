"""The declared limits at the wired entries of a real fleet: the client, the command line,
a Celery worker and the MCP HTTP server. The largest input is accepted; one past the limit
is refused with a typed error naming the limit, and nothing is half-written.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from celery import Celery
from fleet_harness import worker_env
from principal_support import person
from trip_inputs import TRIP_INPUT

from application.client import InvalidRequest
from saga_core.canonical_json import canonical_json
from saga_core.limits import (
    COMMAND_MESSAGE_BYTES,
    DEFINITION_BYTES,
    EVIDENCE_BYTES,
    MCP_BODY_BYTES,
    PLAN_BYTES,
    REASON_CHARS,
    SAGA_INPUT_BYTES,
    LimitExceeded,
)
from sagafleet.example_sagas import trip_definition
from sagafleet.exit_codes import ExitCode


def _padded(document: dict[str, Any], field: str, size: int) -> dict[str, Any]:
    base = len(canonical_json({**document, field: ""}).encode())
    return {**document, field: "x" * (size - base)}


def _count(database: str, query: str) -> int:
    with psycopg.connect(database) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_client_entries_accept_the_largest_input_and_refuse_one_byte_more(fleet, database):
    client = person(fleet, "limits", ("agent", "admin", "operator"))
    # a definition document of exactly definition_bytes registers; a byte more does not
    trip = trip_definition().model_dump(mode="json", exclude={"tools"})
    largest = _padded({**trip, "name": "big_trip"}, "description", DEFINITION_BYTES.value)
    assert client.register_definition(largest)
    with pytest.raises(LimitExceeded, match="definition_bytes"):
        client.register_definition(
            _padded({**trip, "name": "bigger_trip"}, "description", DEFINITION_BYTES.value + 1))
    assert [r.name for r in fleet.definitions.list(tenant=client.tenant)
            if r.name == "bigger_trip"] == []
    # an agent plan a byte over plan_bytes is refused before any model is built
    plan = {"actions": [{"tool": "email.send_correction", "args": {}}]}
    with pytest.raises(LimitExceeded, match="plan_bytes"):
        client.submit_plan(_padded(plan, "goal", PLAN_BYTES.value + 1))
    # a saga input a byte over saga_input_bytes is refused, and no saga stream is written
    streams = _count(database, "SELECT count(DISTINCT stream_id) FROM eventstore.events")
    too_big = _padded(dict(TRIP_INPUT), "customer_email", SAGA_INPUT_BYTES.value + 1)
    with pytest.raises(LimitExceeded, match=f"{SAGA_INPUT_BYTES.value + 1} bytes.*saga_input"):
        client.start("trip", too_big, key="too-big")
    assert _count(database, "SELECT count(DISTINCT stream_id) FROM eventstore.events") == streams
    # a reason of reason_chars is recorded; one character more is refused by name
    started = client.start("trip", TRIP_INPUT, key="reasons", reason="r" * REASON_CHARS.value)
    with pytest.raises(InvalidRequest, match=f"{REASON_CHARS.value + 1} characters"):
        client.cancel(started.saga_id, reason="r" * (REASON_CHARS.value + 1))
    # operator evidence a byte over evidence_bytes is refused before the saga is even read
    with pytest.raises(LimitExceeded, match="evidence_bytes"):
        client.resolve(started.saga_id, "mark_compensated", reason="checked",
                       evidence=_padded({}, "note", EVIDENCE_BYTES.value + 1))


def _bomb(levels: int = 9) -> str:
    lines = ["name: bomb", "version: 1", "a0: &a0 [" + ",".join(["x"] * 9) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    lines.append(f"steps: [{{id: s, tool: flights.hold, semantics: compensable, "
                 f"args: {{flight_id: *a{levels - 1}}}}}]")
    return "\n".join(lines) + "\n"


def test_the_command_line_refuses_each_oversized_input_by_the_limit_name(
    database, broker, tmp_path
):
    # given the alias file of issue 20, a file a byte over the limit, and oversized options
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb())
    big = tmp_path / "big.json"
    big.write_text(" " * DEFINITION_BYTES.value + "{}")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000)
    cases = [
        (["register", str(bomb), "--json"], "yaml_nodes"),
        (["register", str(big), "--json"], "definition_bytes"),
        (["start", "trip", "--input", f"@{deep}", "--json"], "json_depth"),
        (["start", "trip", "--input", "-", "--json"], "input_text_bytes"),  # stdin below
        (["audit", "some-saga", "--at", str(2**63), "--json"], "position_max"),
        (["queue", "--limit", "1001", "--json"], "queue_page_rows"),
        (["resolve", "s", "mark_compensated", "--reason", "r",
          "--evidence", "{" * 1000], "json_depth"),
    ]
    env = worker_env(database, broker)
    procs = [subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", *argv], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for argv, _ in cases]
    stdin = "[" * 300_000  # one byte past input_text_bytes is all it reads of this
    for (argv, limit), proc in zip(cases, procs, strict=True):
        try:
            out, err = proc.communicate("-" in argv and stdin or "", timeout=120)
        except BrokenPipeError:  # it stopped reading at the limit and answered
            out, err = proc.communicate(timeout=120)
        # then each is refused as invalid input, naming the limit, never with a traceback
        assert proc.returncode == ExitCode.INVALID_INPUT, (argv[:2], proc.returncode, err[-800:])
        assert limit in out + err and "Traceback" not in err, (argv[:2], out[-500:], err[-500:])
    # and nothing was registered
    assert _count(database,
                  "SELECT count(*) FROM eventstore.definitions WHERE name = 'bomb'") == 0


def _dead_letters(database: str) -> list[tuple[str, str]]:
    with psycopg.connect(database) as conn:
        return conn.execute("SELECT task, reason FROM fleet.dead_letters").fetchall()


def test_a_worker_dead_letters_an_oversized_command_before_decoding_it(
    fleet, database, broker, workers
):
    workers.start(1)
    agent = Celery("limits", broker=broker, set_as_current=False)
    agent.conf.update(task_serializer="json", accept_content=["json"])
    # given a start_saga command whose arguments are a byte over command_message_bytes
    kwargs = {"definition": "trip", "input": TRIP_INPUT, "key": "oversized", "reason": ""}
    base = len(canonical_json([[], kwargs]).encode())
    kwargs["reason"] = "r" * (COMMAND_MESSAGE_BYTES.value + 1 - base)
    agent.send_task("sagafleet.commands.start_saga", kwargs=kwargs, queue="sagafleet.commands")
    # then it is dead-lettered with the limit named, and no saga was started
    deadline = time.monotonic() + 60
    while not _dead_letters(database) and time.monotonic() < deadline:
        time.sleep(0.2)
    ((task, reason),) = _dead_letters(database)
    assert task == "sagafleet.commands.start_saga" and "command_message_bytes" in reason
    assert fleet.client().find("oversized") is None
    # and the letter keeps what the limit said, not the oversized message
    with psycopg.connect(database) as conn:
        (message,) = conn.execute("SELECT message FROM fleet.dead_letters").fetchone()
    assert set(message) == {"$oversized"} and "command_message_bytes" in message["$oversized"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(port: int, body: bytes, token: str) -> tuple[int, dict[str, Any]]:
    """POST ``body`` to /mcp with its Content-Length, as the principal of ``token``."""
    head = _head(port, token, f"content-length: {len(body)}")
    parts = [body[at:at + 64 * 1024] for at in range(0, len(body), 64 * 1024)]
    status, text = _exchange(port, head, parts)
    try:
        return status, json.loads(text)
    except ValueError:  # an accepted request may be answered as a server-sent event
        return status, {"text": text[:300]}


def _post_chunked(port: int, size: int, token: str) -> tuple[int, dict[str, Any]]:
    """POST ``size`` bytes to /mcp chunked (no Content-Length), then read the answer."""
    chunk = b" " * (16 * 1024)
    parts = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * (size // len(chunk))
    status, text = _exchange(port, _head(port, token, "transfer-encoding: chunked"), parts)
    return status, json.loads(text)


def _head(port: int, token: str, framing: str) -> bytes:
    headers = MCP_HEADERS | {"authorization": f"Bearer {token}"}
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{lines}{framing}\r\n\r\n".encode()


def _exchange(port: int, head: bytes, parts: list[bytes]) -> tuple[int, str]:
    """Send a request as a client that listens while it sends, as curl does: a server may
    answer before it has read the body and close, so the client stops sending when an answer
    is waiting or the connection is gone, then reads the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        try:
            for part in parts:
                if select.select([sock], [], [], 0)[0]:
                    break  # answered early: the rest of the body is not wanted
                sock.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed while the body was still on its way
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read().decode()


MCP_HEADERS = {"accept": "application/json, text/event-stream",
               "content-type": "application/json"}


def _wait_listening(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "no server"
            time.sleep(0.3)


def test_the_mcp_http_server_refuses_a_body_over_the_limit_before_reading_it(
    fleet, database, broker
):
    # given an agent's token: the body cap applies to requests that proved one
    token = fleet.principals.add("acme", "limits-bot", "agent", ["agent"]).token
    port = _free_port()
    server = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", "mcp", "--http", f"127.0.0.1:{port}"],
        env=worker_env(database, broker), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, server)
        # given a JSON-RPC request padded to exactly mcp_body_bytes: it reaches MCP
        request: dict[str, Any] = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "limits", "version": "1"}, "padding": ""}}
        base = len(json.dumps(request).encode())
        request["params"]["padding"] = "p" * (MCP_BODY_BYTES.value - base)
        largest = json.dumps(request).encode()
        assert len(largest) == MCP_BODY_BYTES.value
        status, answer = _post(port, largest, token)
        assert status == 200, answer
        # when a body a byte longer is declared, it is refused by its Content-Length
        status, answer = _post(port, largest + b" ", token)
        assert status == 413
        assert answer["error"]["data"] == {
            "limit": "mcp_body_bytes", "limit_value": MCP_BODY_BYTES.value,
            "seen": MCP_BODY_BYTES.value + 1, "at_least": False}
        # and with a token that proves nobody, it is refused before the limit is even looked at
        status, answer = _post(port, largest + b" ", "sft_" + "A" * 43)
        assert status == 401 and answer["kind"] == "unauthenticated"
        # and a chunked body without a length is cut off as soon as it passes the limit
        status, answer = _post_chunked(port, MCP_BODY_BYTES.value + 16 * 1024, token)
        assert status == 413, answer
        assert answer["error"]["data"]["limit"] == "mcp_body_bytes"
        assert answer["error"]["data"]["at_least"] is True
    finally:
        server.terminate()
        server.wait(timeout=30)
