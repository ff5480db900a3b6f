"""An agent over MCP stdio: the SDK's own client spawns ``python -m sagafleet mcp``, which
runs as the principal of the token it is started with.

Real PostgreSQL and Redis, one real worker process; the test process only reads the log and
sweeps, as the sweeper process would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
from gateway_support import TRIP_INPUT, call, principal_token, recorded
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from saga_core.access.roles import PrincipalKind
from saga_core.engine.events import SagaStarted
from sagafleet.exit_codes import ExitCode
from workers.sweeper import Sweeper

TOOLS = {"list_sagas", "start_saga", "put_secret", "propose_plan", "saga_status", "saga_wait",
         "saga_audit", "cancel_saga"}
"""Every tool an agent gets: no approve, deny or resolve."""


def _server(env: dict[str, str], token: str) -> StdioServerParameters:
    """``sagafleet mcp`` over stdio, started with ``token`` in SAGAFLEET_TOKEN."""
    return StdioServerParameters(command=sys.executable, args=["-m", "sagafleet", "mcp"],
                                 env=env | {"SAGAFLEET_TOKEN": token}, cwd=str(Path.cwd()))


def test_agent_starts_retries_and_follows_a_trip_over_stdio(fleet, processes, server_env):
    # given one worker process and an MCP server started with the token of acme's planner-bot
    processes.start("worker")
    sweeper = Sweeper(fleet)
    token = principal_token(fleet, "acme", "planner-bot")

    async def scenario() -> str:
        async with stdio_client(_server(server_env, token)) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            # when the agent lists the tools
            names = {t.name for t in (await session.list_tools()).tools}
            # then the saga tools are there and approving is not
            assert names == TOOLS

            # when it lists the sagas
            failed, listed = await call(session, "list_sagas")
            assert not failed
            trip = next(d for d in listed["definitions"] if d["name"] == "trip")
            # then each step's semantics come from the definition
            steps = {s["step"]: s for s in trip["steps"]}
            assert steps["hold_flight"]["compensable"] and not steps["hold_flight"]["pivot"]
            assert steps["send_itinerary"]["pivot"]
            assert "approval" in steps["capture_payment"]
            assert "nights" in trip["input_schema"]["required"]

            # when it starts a trip with a key, then retries with the same key
            args = {"definition": "trip", "input": TRIP_INPUT, "idempotency_key": "trip-42",
                    "reason": "the customer asked for the Lisbon trip"}
            failed, first = await call(session, "start_saga", **args)
            assert not failed, first
            failed, again = await call(session, "start_saga", **args)
            # then the retry returns the same saga, and says nothing new was started
            assert not failed and again["saga_id"] == first["saga_id"]
            assert first["created"] and not again["created"] and "note" in again
            assert first["what_will_happen"]["may_need_a_human"]
            saga_id = first["saga_id"]

            # when it watches the saga
            deadline = time.monotonic() + 60
            status: dict = {}
            while time.monotonic() < deadline:
                failed, status = await call(session, "saga_status", saga_id=saga_id)
                assert not failed, status
                if status["terminal"]:
                    break
                sweeper.sweep()
                await anyio.sleep(0.2)
            # then it completes, with a receipt per step
            assert status["status"] == "COMPLETED", status
            assert all(s["receipt"] for s in status["steps"] if s["kind"] == "forward")

            # and the audit shows the agent as the starter, never the secret card token
            failed, audit = await call(session, "saga_audit", saga_id=saga_id)
            assert not failed and audit["hash_chain_intact"]
            assert audit["events"][0]["event"] == "SagaStarted"
            assert audit["events"][0]["actor"] == "planner-bot"
            assert TRIP_INPUT["card_token"] not in json.dumps(audit)
            assert TRIP_INPUT["card_token"] not in json.dumps(status)
            return saga_id

    saga_id = anyio.run(scenario)
    # and the log records the token's tenant and principal and the agent's reason
    started = fleet.repo.load_history(saga_id).events[0]
    assert isinstance(started, SagaStarted)
    assert (started.tenant, started.actor) == ("acme", "planner-bot")
    assert started.reason == "the customer asked for the Lisbon trip"


def test_agent_gets_every_reason_back_and_cannot_see_other_tenants(fleet, server_env):
    # given a saga of tenant acme
    acme = fleet.client(tenant="acme", actor="someone").start(
        "trip", TRIP_INPUT, key="acme-1", reason="test")

    async def scenario() -> None:
        async with stdio_client(_server(server_env, principal_token(fleet, "beta", "b-bot"))) \
                as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            # when an agent of tenant beta asks for it
            failed, refused = await call(session, "saga_status", saga_id=acme.saga_id)
            # then it is refused as if it did not exist
            assert failed and refused["error"] == "SagaNotFound"
            failed, refused = await call(session, "cancel_saga", saga_id=acme.saga_id,
                                         reason="not mine")
            assert failed and refused["error"] == "SagaNotFound"
            failed, refused = await call(session, "saga_wait", saga_id=acme.saga_id,
                                         timeout_seconds=1)
            assert failed and refused["error"] == "SagaNotFound"
            # and a wait longer than the tool allows is named, not attempted
            failed, rejected = await call(session, "saga_wait", saga_id=acme.saga_id,
                                          timeout_seconds=3600)
            assert failed and rejected["problems"][0]["where"] == "timeout_seconds"

            # when it starts a trip with a missing and a mistyped field
            bad = {k: v for k, v in TRIP_INPUT.items() if k != "card_token"} | {"nights": "two"}
            failed, rejected = await call(session, "start_saga", definition="trip", input=bad,
                                          idempotency_key="beta-1", reason="try")
            # then each field comes back with its rule
            assert failed and rejected["error"] == "InputValidationError"
            found = {(p["where"], p["rule"]) for p in rejected["problems"]}
            assert found == {("input.card_token", "missing"), ("input.nights", "wrong_type")}

            # when it proposes a plan with an unknown tool and a mistyped argument
            plan = [
                {"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": "two",
                                                 "guest_email": "a@b.c"}},
                {"tool": "rockets.launch", "args": {}},
            ]
            failed, rejected = await call(session, "propose_plan", steps=plan)
            # then every reason comes back at once
            assert failed and rejected["error"] == "PlanRejected"
            rules = {p["rule"] for p in rejected["problems"]}
            assert {"wrong_argument_type", "unknown_tool"} <= rules
            assert all(p["where"] and p["message"] for p in rejected["problems"])

            # when it proposes a valid plan
            good = [{"tool": "hotels.hold", "args": {"hotel_id": "HT1", "nights": 1,
                                                     "guest_email": "a@b.c"}}]
            failed, accepted = await call(session, "propose_plan", steps=good, goal="a room")
            # then it gets the definition to start, with semantics from the catalogue
            assert not failed and accepted["accepted"]
            assert accepted["steps"][0]["semantics"] == "compensable"
            assert accepted["start_with"]["arguments"]["definition"] == accepted["definition"]
            # and plans stay out of the shared list of sagas
            failed, listed = await call(session, "list_sagas")
            assert [d["name"] for d in listed["definitions"]] == ["trip"]

    anyio.run(scenario)


def _run_mcp(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``sagafleet mcp`` over stdio with no client: it must refuse before serving."""
    return subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", "mcp", *args], env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120, check=False)


def test_stdio_refuses_to_start_without_a_valid_token(fleet, database, server_env, tmp_path):
    # given a revoked token (also in a file), and nothing recorded yet
    revoked = principal_token(fleet, "acme", "old-bot")
    fleet.principals.revoke("acme", "old-bot", "leaked")
    token_file = tmp_path / "token"
    token_file.write_text(revoked + "\n")
    before = recorded(database)
    # when the server is started with no token, an unknown one, the revoked one, or its file
    runs = {
        "none": _run_mcp(server_env),
        "unknown": _run_mcp(server_env | {"SAGAFLEET_TOKEN": "sft_" + "A" * 43}),
        "revoked": _run_mcp(server_env | {"SAGAFLEET_TOKEN": revoked}),
        "revoked file": _run_mcp(server_env, "--token-file", str(token_file)),
    }
    # then each exits 11 (unauthenticated), saying why, without printing the token
    for why, run in runs.items():
        assert run.returncode == ExitCode.UNAUTHENTICATED, (why, run.stderr)
        assert "token" in run.stderr and "Traceback" not in run.stderr, (why, run.stderr)
        assert revoked not in run.stderr + run.stdout
    assert "SAGAFLEET_TOKEN" in runs["none"].stderr
    # and nothing was started, registered or deposited
    assert recorded(database) == before


def test_stdio_runs_as_an_auditor_that_may_read_but_not_start(fleet, server_env):
    # given a saga of acme, and a server started with the token of acme's auditor
    saga = fleet.client(tenant="acme", actor="someone").start(
        "trip", TRIP_INPUT, key="acme-audited", reason="test")
    token = principal_token(fleet, "acme", "ada", "auditor", kind=PrincipalKind.PERSON)

    async def scenario() -> None:
        async with stdio_client(_server(server_env, token)) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            # then it is offered the same tools, none of them an approval
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            # when it reads the saga, then it may
            failed, status = await call(session, "saga_status", saga_id=saga.saga_id)
            assert not failed and status["saga_id"] == saga.saga_id
            # when it tries to start a saga or deposit a secret
            for tool, arguments in [
                ("start_saga", {"definition": "trip", "input": TRIP_INPUT,
                                "idempotency_key": "by-ada", "reason": "audit"}),
                ("put_secret", {"value": "tok"}),
            ]:
                failed, refused = await call(session, tool, **arguments)
                # then it is refused: FORBIDDEN, naming the principal and the action
                assert failed and refused["error"] == "NotPermitted", refused
                assert refused["kind"] == "forbidden" and "'ada'" in refused["message"]
                assert "start" in refused["message"] and refused["hint"]

    anyio.run(scenario)
    # and nothing was started in its name
    assert fleet.client(tenant="acme").find("by-ada") is None
