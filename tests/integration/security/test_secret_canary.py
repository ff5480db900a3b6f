"""One canary secret, driven through every entry, is found nowhere it must not be.

Issue 31, part 1: a value given for a field the definition or catalogue declares secret
stays secret wherever it flows. One unique card token goes in through the Python client,
the command line, MCP over HTTP, signed Celery commands (by ref, raw — refused — and
redelivered), agent plans and replans (one refused for sending it to a flight id, one
writing it out as a literal), refused commands (dead letters), an operator's denial
quoting it, and tools whose providers echo every argument into their receipts, their
errors, the receipt a lookup finds and their log lines. The token is also given again where
it does not belong (a hotel id, a reason, a revised plan), so the last line of defence by
value has something to find.

Then everything is scanned: every row of every table of every schema, every key and value
of the broker, the log of every process (worker at DEBUG, sweeper, projector, MCP server),
every CLI output, MCP answer and console page. While sagas wait for a person the token may
be only in the vault (``fleet.secrets``); once they end, nowhere at all. The figures are
printed (``-s``): places, rows, keys, log lines, hits, and the scrubs each process counted.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from fleet_harness import worker_env
from leak_scan import broker_dump, scan_for
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from principal_support import authenticated, issue_token, token_for
from prometheus_client.parser import text_string_to_metric_families
from signed_agent import agent_signer, bare_celery, send
from starlette.testclient import TestClient
from trip_inputs import TRIP_INPUT

from application.client import saga_id_for_key
from projections import ProjectionContext
from projections.status import projection_status
from saga_core.access.roles import PrincipalKind
from saga_core.contracts import SagaStatus
from saga_core.engine.events import PlanRevised, SagaStarted
from saga_core.errors import PlanRejected
from sagafleet.console.app import create_app
from sagafleet.console.service import console_for
from sagafleet.console.sessions import SessionPolicy
from sagafleet.processes import spawn_sagafleet, stop_processes

CANARY = f"tok_CANARY_{uuid.uuid4().hex}"
TENANT = "canary"
ECHO_TOOLS = "echo_tools:echoing_trip_tool_set"
GATED = 250_000  # above the capture gate's limit: the saga waits for a person
CARD = "${input.card_token}"
FLIGHT = {"tool": "flights.hold", "id": "fl",
          "args": {"flight_id": "FL9", "passenger_email": "ada@example.com"}}
GATED_CAPTURE = {"tool": "payments.capture", "id": "pay",
                 "args": {"amount": GATED, "currency": "EUR", "card_token": CARD}}
CAPTURE = {"tool": "payments.capture", "id": "pay",
           "args": {"amount": 10_000, "currency": "EUR", "card_token": CARD}}
VAULT = ("fleet.secrets",)
POLICY = SessionPolicy(idle=timedelta(minutes=30), absolute=timedelta(hours=12))


def test_the_canary_secret_is_nowhere_it_must_not_be_on_every_path(
    fleet, database, broker, tmp_path
):
    # given a worker (DEBUG, echoing providers), a sweeper, a projector and an MCP server,
    # each logging to a file
    env = {**worker_env(database, broker), "SAGAFLEET_TOOLS": ECHO_TOOLS,
           "SAGAFLEET_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    metrics_port, mcp_port = _free_port(), _free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = [
        spawn_sagafleet(["worker", "--loglevel", "DEBUG", "--metrics-port", str(metrics_port)],
                        env, logs / "worker.log"),
        spawn_sagafleet(["sweeper"], env, logs / "sweeper.log"),
        spawn_sagafleet(["projector"], env, logs / "projector.log"),
        spawn_sagafleet(["mcp", "--http", f"127.0.0.1:{mcp_port}"], env, logs / "mcp.log"),
    ]
    run = Run(fleet, database, broker, env, tmp_path)
    try:
        run.python_entries()
        run.cli_entries()
        _wait_for("the MCP server", lambda: _listening(mcp_port, procs[3]))
        run.mcp_entries(mcp_port)
        run.signed_entries()
        run.wait_for_the_refused_commands()
        # then, while sagas wait for a person, the token is in the vault and nowhere else
        run.wait_until_settled(live=True)
        run.console_pages()
        live = scan_for(CANARY, database=database, broker=broker, logs=logs.glob("*.log"),
                        captured=run.captured, vault=VAULT)
        print(f"\ncanary scan while sagas wait for a person: {live.summary()}")
        assert live.hits == []
        assert live.allowed, "the waiting sagas keep the token in the vault"
        # when people deny the waiting captures (one quoting the token) and every saga ends
        run.deny_the_waiting()
        run.wait_until_settled(live=False)
        _wait_for("the vault to empty", lambda: _vault_rows(database) == (0, 0))
        _wait_for("the projector to catch up", lambda: _projected(fleet))
        worker_scrubs = _scrubs(metrics_port, fleet)
    finally:
        stop_processes(procs)
    # then, with every process stopped and its log flushed, the token is nowhere at all
    final = scan_for(CANARY, database=database, broker=broker, logs=logs.glob("*.log"),
                     captured=run.captured)
    print(f"canary scan once every saga ended: {final.summary()}")
    print(f"scrubs counted: worker {worker_scrubs}; test process {run.scrubs()}")
    assert final.hits == []
    assert final.tables >= 20 and final.rows > 0 and final.log_files == 4
    # and each last line of defence was exercised: echoed receipts, errors, lookups and log
    # lines in the worker; a start, a revision and a dead letter quoting it there too
    for place in ("tool_result", "lookup", "log", "start", "plan", "dead_letter"):
        assert worker_scrubs.get(place, 0) >= 1, (place, worker_scrubs)
    for place in ("start", "plan", "command"):
        assert run.scrubs().get(place, 0) >= 1, (place, run.scrubs())


class Run:
    """The scenario's entries, the sagas they started and what the test captured."""

    def __init__(self, fleet: Any, database: str, broker: str, env: dict[str, str],
                 tmp: Path) -> None:
        self.fleet, self.database, self.broker, self.env, self.tmp = (
            fleet, database, broker, env, tmp)
        self.client = fleet.client(tenant=TENANT, actor="py-agent")
        self.sagas: dict[str, str] = {}  # what started it -> saga id
        self.waiting: list[str] = []  # sagas whose capture waits for a person
        self.captured: dict[str, str] = {}  # CLI outputs, MCP answers, console pages
        self.agent = bare_celery(broker)
        self.signer = agent_signer(fleet, TENANT, "celery-agent")
        self.plan_saga = ""

    def scrubs(self) -> dict[str, int]:
        """What this process's guard replaced, by place."""
        guard = self.fleet.secret_guard
        return {place: guard.scrubbed(place) for place in
                ("start", "command", "plan", "answer", "page") if guard.scrubbed(place)}

    # -- Python: starts, a refused plan, a plan saga and its replans -----------------------

    def python_entries(self) -> None:
        client = self.client
        # the token by value, and again in the hotel id and the reason; the capture's answer
        # is lost after it committed, so the worker finds it by a lookup
        self.fleet.sandbox.faults.add("payments", "capture", "commit_then_timeout",
                                      saga_id=saga_id_for_key(TENANT, "py"), count=1)
        self.sagas["python"] = client.start(
            "trip", {**TRIP_INPUT, "card_token": CANARY, "hotel_id": CANARY}, key="py",
            reason=f"charge {CANARY}").saga_id
        self.sagas["python gated"] = client.start(
            "trip", {**TRIP_INPUT, "amount": GATED, "card_token": CANARY},
            key="py-gated").saga_id
        self.waiting.append(self.sagas["python gated"])
        # a plan that sends the token to a flight id is refused, and registers nothing
        leaking = {"actions": [{**FLIGHT, "args": {**FLIGHT["args"], "flight_id": CARD}},
                               GATED_CAPTURE]}
        with pytest.raises(PlanRejected, match="secret_flows_to_public"):
            client.submit_plan(leaking)
        # a plan saga that waits for its capture's approval
        plan = client.submit_plan({"actions": [FLIGHT, GATED_CAPTURE]})
        self.plan_saga = client.start(plan.name, {"card_token": CANARY}, key="py-plan").saga_id
        self.sagas["python plan"] = self.plan_saga
        self.waiting.append(self.plan_saga)
        _wait_for("the plan saga's approval request", lambda: self._waits(self.plan_saga))
        # a replan writing the token out as a hotel id is recorded with a marker
        hotel = {"tool": "hotels.hold", "id": "ht",
                 "args": {"hotel_id": CANARY, "nights": 1, "guest_email": "ada@example.com"}}
        client.revise_plan(self.plan_saga, {"actions": [FLIGHT, GATED_CAPTURE, hotel]})
        # and a replan sending the secret field to a flight id is refused
        with pytest.raises(PlanRejected, match="secret_flows_to_public"):
            client.revise_plan(self.plan_saga, {"actions": [
                FLIGHT, GATED_CAPTURE, hotel,
                {**FLIGHT, "id": "fl2", "args": {**FLIGHT["args"], "flight_id": CARD}}]})

    def _waits(self, saga_id: str) -> bool:
        return bool(self.fleet.client(tenant=TENANT).status(saga_id).pending_approvals)

    # -- the command line ----------------------------------------------------------------

    def cli_entries(self) -> None:
        token = issue_token(self.database, "cli-agent", ["agent"], tenant=TENANT,
                            kind=PrincipalKind.AGENT)
        put = self._cli("secrets put", ["secrets", "put", "--json"], token, stdin=CANARY)
        ref = json.loads(put)["secret_ref"]
        for name, data in (("cli ref", {**TRIP_INPUT, "card_token": ref}),
                           ("cli raw", {**TRIP_INPUT, "card_token": CANARY})):
            path = self.tmp / f"{name.replace(' ', '-')}.json"
            path.write_text(json.dumps(data))
            started = json.loads(self._cli(name, [
                "start", "trip", "--input", f"@{path}", "--key", name.replace(" ", "-"),
                "--reason", f"by the CLI, {CANARY}", "--json"], token))
            self.sagas[name] = started["saga_id"]
            path.unlink()  # the input file held the token: it was the caller's, not ours
        self._cli("status", ["status", self.sagas["cli raw"], "--json"], token)

    def _cli(self, name: str, args: list[str], token: str, stdin: str = "") -> str:
        done = subprocess.run(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "sagafleet", *args], input=stdin.encode(),
            env={**self.env, "SAGAFLEET_TOKEN": token}, capture_output=True, timeout=120,
            check=False)
        output = (done.stdout + done.stderr).decode(errors="replace")
        self.captured[f"CLI {name}"] = output
        assert done.returncode == 0, output
        return done.stdout.decode()

    # -- MCP over HTTP ---------------------------------------------------------------------

    def mcp_entries(self, port: int) -> None:
        token = self.fleet.principals.add(TENANT, "mcp-bot", "agent", ["agent"]).token
        answers = anyio.run(_mcp_calls, f"http://127.0.0.1:{port}/mcp", token)
        for name, answer in answers.items():
            self.captured[f"MCP {name}"] = json.dumps(answer)
        self.sagas["mcp ref"] = answers["start by ref"]["saga_id"]
        self.sagas["mcp raw"] = answers["start by value"]["saga_id"]
        self.sagas["mcp gated"] = answers["start gated"]["saga_id"]
        self.waiting.append(self.sagas["mcp gated"])

    # -- signed Celery commands -------------------------------------------------------------

    def signed_entries(self) -> None:
        signer, agent = self.signer, self.agent
        # by ref (deposited with the CLI), the reason quoting the token; delivered twice
        ref = json.loads(self._cli("secrets put (celery)", ["secrets", "put", "--json"],
                                   issue_token(self.database, "cli-agent", ["agent"],
                                               tenant=TENANT, kind=PrincipalKind.AGENT),
                                   stdin=CANARY))["secret_ref"]
        command = signer.start_saga("trip", {**TRIP_INPUT, "card_token": ref},
                                    key="celery-ref", reason=f"by ref, {CANARY}")
        send(agent, command, send(agent, command))
        # a plan with its input by ref, started by the worker
        plan_ref = self.client.put_secret(CANARY).as_input()
        send(agent, signer.submit_plan({"actions": [FLIGHT, CAPTURE]},
                                       input={"card_token": plan_ref}, key="celery-plan"))
        # a replan of the waiting plan saga writing the token into a guest's address
        guest = {"tool": "hotels.hold", "id": "ht2",
                 "args": {"hotel_id": "HT7", "nights": 1,
                          "guest_email": f"{CANARY}@example.com"}}
        hotel = {"tool": "hotels.hold", "id": "ht",
                 "args": {"hotel_id": CANARY, "nights": 1, "guest_email": "ada@example.com"}}
        send(agent, signer.submit_plan({"actions": [FLIGHT, GATED_CAPTURE, hotel, guest]},
                                       revises=self.plan_saga, reason="a second room"))
        # refused: a raw token over the broker (its reason quoting it), a plan giving it as
        # a literal, a start of a definition nobody registered yet
        send(agent, signer.start_saga("trip", {**TRIP_INPUT, "card_token": CANARY},
                                      key="celery-raw", reason=f"raw {CANARY}"))
        send(agent, signer.submit_plan({"actions": [
            FLIGHT, {**CAPTURE, "args": {**CAPTURE["args"], "card_token": CANARY}}]}))
        send(agent, signer.start_saga("later-trip", {**TRIP_INPUT, "card_token": CANARY},
                                      key="later"))
        # and a misspelt task (Celery drops it; its report must not show what it carried)
        send(agent, signer.sign("sagafleet.commands.start_sagas", {
            "definition": "trip", "input": {**TRIP_INPUT, "card_token": CANARY}}))
        for key in ("celery-ref", "celery-plan"):
            self.sagas[key] = _wait_for(f"the {key} saga",
                                        lambda k=key: self.client.find(k)).saga_id

    def wait_for_the_refused_commands(self) -> None:
        letters = _wait_for("three dead letters", lambda: _dead_letters(self.database, 3))
        reasons = " ".join(reason for _, reason in letters)
        assert "secret_over_broker" in reasons and "secret_literal" in reasons
        assert "later-trip" in reasons
        _wait_for("the worker to report the misnamed task", lambda: "start_sagas" in (
            self.tmp / "logs" / "worker.log").read_text(errors="replace"))
        _wait_for("the refused messages to leave the broker",
                  lambda: not any(CANARY.encode() in chunk
                                  for chunk in broker_dump(self.broker)[1]))
        _wait_for("the replan by command", lambda: len(self._revisions()) == 2)

    def _revisions(self) -> list[PlanRevised]:
        return [e for e in self.fleet.repo.load_history(self.plan_saga).events
                if isinstance(e, PlanRevised)]

    # -- people ----------------------------------------------------------------------------

    def console_pages(self) -> None:
        console = console_for(self.fleet, POLICY)
        with TestClient(create_app(console), base_url="http://testserver",
                        follow_redirects=False) as browser:
            form = browser.get("/sign-in").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', form)
            assert csrf is not None
            signed = browser.post("/sign-in", data={
                "csrf": csrf.group(1), "next": "/queue",
                "token": token_for(self.fleet, "olivia", ("operator", "approver"),
                                   tenant=TENANT)})
            assert signed.status_code == 303, signed.text
            for path in ["/queue", "/sagas", "/dead-letters",
                         *(f"/sagas/{saga_id}" for saga_id in self.sagas.values())]:
                page = browser.get(path)
                assert page.status_code == 200, (path, page.text)
                self.captured[f"console {path}"] = page.text

    def deny_the_waiting(self) -> None:
        ann = self.fleet.client_for(authenticated(self.fleet, "ann", ["approver"],
                                                  tenant=TENANT))
        for saga_id in self.waiting:
            step = "pay" if saga_id == self.plan_saga else "capture_payment"
            ann.deny(saga_id, step, reason=f"the card {CANARY} is reported stolen")

    def wait_until_settled(self, *, live: bool) -> None:
        """Every saga ended, but (``live``) those waiting for a person."""
        client = self.fleet.client(tenant=TENANT)

        def settled() -> bool:
            views = {saga_id: client.status(saga_id) for saga_id in self.sagas.values()}
            return all(view.terminal or (live and saga_id in self.waiting
                                         and bool(view.pending_approvals))
                       for saga_id, view in views.items())

        _wait_for("the sagas to settle", settled, timeout=120)
        for name, saga_id in self.sagas.items():
            started = self.fleet.repo.load_history(saga_id).events[0]
            assert isinstance(started, SagaStarted)
            assert started.input["card_token"] == {"$secret": "card_token"}, name
        if not live:
            statuses = {name: client.status(saga_id).status
                        for name, saga_id in self.sagas.items()}
            assert statuses["python"] == SagaStatus.COMPLETED, statuses


async def _mcp_calls(url: str, token: str) -> dict[str, dict[str, Any]]:
    """Every MCP call of the scenario, as the agent of ``token``: its answers by name."""
    answers: dict[str, dict[str, Any]] = {}

    async def call(session: ClientSession, name: str, tool: str, **arguments: Any) -> None:
        result = await session.call_tool(tool, arguments)
        answers[name] = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert not result.is_error, answers[name]

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        await call(session, "put secret", "put_secret", value=CANARY)
        await call(session, "start by ref", "start_saga", definition="trip",
                   input={**TRIP_INPUT, "card_token": answers["put secret"]["secret_ref"]},
                   idempotency_key="mcp-ref", reason="over MCP, by ref")
        echoed = {**TRIP_INPUT, "card_token": CANARY, "hotel_id": CANARY}
        await call(session, "dry run", "start_saga", definition="trip", input=echoed,
                   idempotency_key="mcp-dry", reason="what would happen", dry_run=True)
        await call(session, "start by value", "start_saga", definition="trip", input=echoed,
                   idempotency_key="mcp-raw", reason=f"over MCP, {CANARY}")
        await call(session, "start gated", "start_saga", definition="trip",
                   input={**TRIP_INPUT, "amount": GATED, "card_token": CANARY},
                   idempotency_key="mcp-gated", reason="a large one")
        await call(session, "plan dry run", "propose_plan", steps=[FLIGHT, GATED_CAPTURE],
                   dry_run=True, input={"card_token": CANARY})
        for saga in ("start by value", "start gated"):
            saga_id = answers[saga]["saga_id"]
            await call(session, f"status of {saga}", "saga_status", saga_id=saga_id)
            await call(session, f"audit of {saga}", "saga_audit", saga_id=saga_id)
    return answers


def _scrubs(port: int, fleet: Any) -> dict[str, int]:
    """What the worker's guard replaced, by place (its Prometheus endpoint, scraped with a
    fleet operator's token as Prometheus does)."""
    token = token_for(fleet, "prometheus", ("fleet_operator",), tenant="fleet")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
        text = answer.read().decode()
    return {sample.labels["place"]: int(sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "sagafleet_secret_scrubs_total"}


def _projected(fleet: Any) -> bool:
    lags = [status.lag for status in
            projection_status(ProjectionContext(fleet.store, fleet.definitions))]
    return all(lag is not None and lag.events_behind == 0 for lag in lags)


def _dead_letters(database: str, count: int) -> list[tuple[Any, str]] | None:
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT message, reason FROM fleet.dead_letters").fetchall()
    return rows if len(rows) >= count else None


def _vault_rows(database: str) -> tuple[int, int]:
    """(secrets of sagas, deposits still holding a value)."""
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM fleet.secrets),"
            " (SELECT count(*) FROM fleet.secret_refs WHERE value IS NOT NULL)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _wait_for(what: str, condition: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "the MCP server exited"
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True
