"""An agent over MCP stdio: the SDK's own client spawns ``python -m sagafleet mcp``.

Real PostgreSQL and Redis, one real worker process; the test process only reads the log and
sweeps, as the sweeper process would.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
from gateway_support import TRIP_INPUT, call
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from saga_core.events import SagaStarted
from workers.sweeper import Sweeper


def _server(env: dict[str, str], tenant: str, actor: str = "planner-bot") -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "sagafleet", "mcp", "--tenant", tenant,
                                      "--actor", actor],
        env=env, cwd=str(Path.cwd()))


def test_agent_starts_retries_and_follows_a_trip_over_stdio(fleet, processes, server_env):
    # given one worker process and an MCP server bound to tenant acme as planner-bot
    processes.start("worker")
    sweeper = Sweeper(fleet)

    async def scenario() -> str:
        async with stdio_client(_server(server_env, "acme")) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            # when the agent lists the tools
            names = {t.name for t in (await session.list_tools()).tools}
            # then the saga tools are there and approving is not
            assert names == {"list_sagas", "start_saga", "put_secret", "propose_plan",
                             "saga_status", "saga_wait", "saga_audit", "cancel_saga"}

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
    # and the log records the actor and the agent's reason on SagaStarted
    started = fleet.repo.load(saga_id).events[0]
    assert isinstance(started, SagaStarted)
    assert (started.tenant, started.actor) == ("acme", "planner-bot")
    assert started.reason == "the customer asked for the Lisbon trip"


def test_agent_gets_every_reason_back_and_cannot_see_other_tenants(fleet, server_env):
    # given a saga of tenant acme
    acme = fleet.client(tenant="acme", actor="someone").start(
        "trip", TRIP_INPUT, key="acme-1", reason="test")

    async def scenario() -> None:
        async with stdio_client(_server(server_env, "beta")) as (read, write), \
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
