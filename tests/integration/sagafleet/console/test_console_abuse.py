"""Abuse at the console's edge: live streams bounded per session, principal, tenant and
process (one tenant cannot blind the others); failed sign-ins slowed per address and token
prefix, counted in the database so every console process sees them; one security-log line
per refusal, never a token; HSTS over https; a NUL in a filter is invalid input.

The live streams are served by a real uvicorn (a stream never ends, which Starlette's test
client cannot take); the rest by the test client, in process, on the test's PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import uvicorn
from console_support import CSRF, POLICY, csrf_of, sign_in, start_waiting_capture
from principal_support import token_for
from read_model_support import project_all
from starlette.testclient import TestClient

from sagafleet.console.app import create_app
from sagafleet.console.core import Console
from sagafleet.console.headers import HSTS
from sagafleet.console.live import LiveHub, LiveLimits
from sagafleet.console.service import console_for
from sagafleet.console.throttle import WAITING_PER_KEY, ThrottlePolicy, throttle_keys
from sagafleet.security_log import ACCESS_LOGGER, SECURITY_LOGGER

try:  # the HTTP client the mcp dependency brings (starlette's test client uses it too)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - an environment with the original package
    import httpx  # type: ignore[no-redef]

pytestmark = pytest.mark.integration

LIMITS = LiveLimits(per_session=2, per_principal=3, per_tenant=4, per_process=6)
QUICK = ThrottlePolicy(free_failures=2, max_delay_s=0.01)
"""Two free failures, then waits of 10 ms: slowed, and the test stays short."""


def _security(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """Every security-log line written so far, parsed."""
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == SECURITY_LOGGER]


@pytest.fixture
def security_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[dict[str, Any]]]:
    """The security log's lines, captured (from the server's threads too)."""
    caplog.set_level(logging.WARNING, logger=SECURITY_LOGGER)
    return lambda: _security(caplog)


# -- live streams --------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(console: Console) -> Iterator[str]:
    """The console, with small live-stream bounds, served by uvicorn in a thread."""
    console.live = LiveHub(console.fleet.store, heartbeat_s=0.5, limits=LIMITS)
    server = uvicorn.Server(uvicorn.Config(create_app(console), host="127.0.0.1",
                                           port=_free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # only ends a hung start
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the console never started"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}"
    server.should_exit = True
    thread.join(timeout=30)


def _session(base: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30)
    csrf = CSRF.search(client.get("/sign-in").text)
    assert csrf
    assert client.post("/sign-in", data={"csrf": csrf.group(1), "token": token}
                       ).status_code == 303
    return client


def _open(streams: ExitStack, client: httpx.Client) -> Iterator[str] | httpx.Response:
    """Open a live stream: its lines once it is subscribed (keep them: a dropped iterator
    closes its connection), or the refusal."""
    response = streams.enter_context(client.stream("GET", "/live"))
    if response.status_code != 200:
        response.read()
        return response
    lines = response.iter_lines()
    assert next(lines).startswith("retry:")  # subscribed: the hub counts it now
    return lines


def _next_event(lines: Iterator[str]) -> str:
    for line in lines:
        if line.startswith("event: "):
            return line.removeprefix("event: ")
    raise AssertionError("the stream ended")


def test_a_session_over_its_cap_is_refused_while_another_tenants_session_streams(
        fleet, console, served, security_log):
    ana = _session(served, token_for(fleet, "ana", ("approver",), tenant="acme"))
    gus = _session(served, token_for(fleet, "gus", ("approver",), tenant="globex"))
    with ExitStack() as streams:
        # given ana's session holding the two streams a session may
        held = [_open(streams, ana) for _ in range(LIMITS.per_session)]
        assert all(not isinstance(s, httpx.Response) for s in held)
        # when it opens one more
        refused = _open(streams, ana)
        # then that one is refused as the session's excess (429, try later), not the server's
        assert isinstance(refused, httpx.Response) and refused.status_code == 429
        assert int(refused.headers["retry-after"]) > 0
        assert "session" in refused.text
        # while another tenant's session still opens its stream and is told of a move
        theirs = _open(streams, gus)
        assert not isinstance(theirs, httpx.Response)
        start_waiting_capture(fleet, tenant="globex")
        project_all(console.read)
        assert _next_event(theirs) == "moved"
        assert console.live.subscribers == LIMITS.per_session + 1
    # and the refusal is a line of the security log, naming who, never a session id
    (line,) = [e for e in security_log() if e["event"] == "throttled"]
    assert (line["status"], line["path"], line["tenant"], line["principal"]) == (
        429, "/live", "acme", "ana")
    assert "session" in line["reason"]
    for cookie in ana.cookies.values():
        assert cookie not in json.dumps(security_log())
    ana.close()
    gus.close()


def test_a_principal_a_tenant_and_the_process_each_have_their_bound(fleet, served):
    tokens = {name: token_for(fleet, name, ("approver",), tenant=tenant)
              for name, tenant in (("ana", "acme"), ("bob", "acme"), ("gus", "globex"),
                                   ("gil", "globex"))}
    sessions = {name: [_session(served, token) for _ in range(2)]
                for name, token in tokens.items()}
    held: list[Iterator[str] | httpx.Response] = []
    with ExitStack() as streams:
        # given ana holding the three streams a principal may, over two sessions
        held += [_open(streams, client) for client in (*sessions["ana"], sessions["ana"][1])]
        # then a fourth, in a session with room, is refused as the principal's excess
        over = _open(streams, sessions["ana"][0])
        assert isinstance(over, httpx.Response) and over.status_code == 429
        assert "principal" in over.text
        # when bob, of the same tenant, opens one: acme holds four, its bound
        held.append(_open(streams, sessions["bob"][0]))
        tenant_over = _open(streams, sessions["bob"][1])
        assert isinstance(tenant_over, httpx.Response) and tenant_over.status_code == 429
        assert "tenant" in tenant_over.text
        # and globex still opens two, which fill the process
        held += [_open(streams, client) for client in (sessions["gus"][0], sessions["gil"][0])]
        assert not any(isinstance(stream, httpx.Response) for stream in held)
        # then one more, within every bound of its own, is refused as the server's (503)
        full = _open(streams, sessions["gil"][1])
        assert isinstance(full, httpx.Response) and full.status_code == 503
        assert int(full.headers["retry-after"]) > 0
    for clients in sessions.values():
        for client in clients:
            client.close()


def test_closed_streams_give_their_room_back(fleet, console, served):
    ana = _session(served, token_for(fleet, "ana", ("approver",), tenant="acme"))
    for _ in range(3):  # more rounds than the session's bound: each round closes its streams
        with ExitStack() as streams:
            held = [_open(streams, ana) for _ in range(LIMITS.per_session)]
            assert not any(isinstance(stream, httpx.Response) for stream in held)
        deadline = time.monotonic() + 30  # only ends a hang: the server notices the close
        while console.live.subscribers:
            assert time.monotonic() < deadline, "a closed stream kept its room"
            time.sleep(0.02)
    ana.close()


# -- sign-in throttle ----------------------------------------------------------------------

def _attempt(client: TestClient, token: str) -> Any:
    form = client.get("/sign-in")
    return client.post("/sign-in", data={"csrf": csrf_of(form.text), "token": token,
                                         "next": "/queue"})


@pytest.fixture
def quick(fleet) -> Console:
    """A console whose sign-ins are slowed after two failures, by 10 ms."""
    return console_for(fleet, POLICY, signin=QUICK)


def test_forty_wrong_sign_ins_are_slowed_and_logged_and_the_right_token_still_signs_in(
        fleet, quick, security_log):
    token = token_for(fleet, "olivia", ("operator",))
    client = TestClient(create_app(quick), follow_redirects=False, client=("203.0.113.7", 1))
    # when forty wrong tokens are tried from one address in a row
    wrong = [f"sft_{i:02d}" + "x" * 41 for i in range(40)]
    answers = [_attempt(client, guess) for guess in wrong]
    # then each is refused (401), and each refusal is a line of the security log
    assert {a.status_code for a in answers} == {401}
    lines = [e for e in security_log() if e["event"] == "signin_refused"]
    assert len(lines) == 40
    assert {line["client"] for line in lines} == {"203.0.113.7"}
    # and past the two free failures each attempt was slowed first
    assert [line.get("delay_s") for line in lines[:2]] == [None, None]
    assert all(line["delay_s"] == QUICK.max_delay_s for line in lines[2:])
    # when the person with the right token signs in from the same address
    answer = _attempt(client, token)
    # then they are in, after the same wait (slowed, never locked out), and that is logged
    assert answer.status_code == 303
    (slowed,) = [e for e in security_log() if e["event"] == "signin_slowed"]
    assert slowed["status"] == 303 and slowed["delay_s"] == QUICK.max_delay_s
    # and no line holds a token, right or wrong
    text = json.dumps(security_log())
    assert token not in text and not any(guess in text for guess in wrong)


def test_another_address_is_not_slowed_by_one_that_failed(fleet, quick, security_log):
    noisy = TestClient(create_app(quick), follow_redirects=False, client=("198.51.100.1", 1))
    calm = TestClient(create_app(quick), follow_redirects=False, client=("198.51.100.2", 1))
    for i in range(5):
        assert _attempt(noisy, f"sft_noise{i}" + "n" * 38).status_code == 401
    # when another address signs in wrong, then right
    assert _attempt(calm, "sft_calmtypo" + "c" * 35).status_code == 401
    assert _attempt(calm, token_for(fleet, "carla", ("operator",))).status_code == 303
    # then neither of its attempts waited
    calm_lines = [e for e in security_log() if e["client"] == "198.51.100.2"]
    assert [e["event"] for e in calm_lines] == ["signin_refused"]
    assert "delay_s" not in calm_lines[0]


def test_failures_are_shared_by_every_console_process(fleet, security_log):
    # given two consoles over the same database (two replicas behind a load balancer)
    first, second = (TestClient(create_app(console_for(fleet, POLICY, signin=QUICK)),
                                follow_redirects=False, client=("192.0.2.5", 1))
                     for _ in range(2))
    # when the first hears the two free failures of an address
    for i in range(QUICK.free_failures):
        assert _attempt(first, f"sft_first{i}" + "f" * 38).status_code == 401
    # then the second slows that address's next attempt
    assert _attempt(second, "sft_second" + "s" * 37).status_code == 401
    assert security_log()[-1]["delay_s"] == QUICK.max_delay_s


def test_a_token_prefix_that_failed_is_slowed_from_any_address(fleet, quick, security_log):
    prefix = "sft_SAMEPREF"
    for i in range(QUICK.free_failures):
        client = TestClient(create_app(quick), follow_redirects=False,
                            client=(f"203.0.113.{10 + i}", 1))
        assert _attempt(client, prefix + f"{i}" * 35).status_code == 401
    elsewhere = TestClient(create_app(quick), follow_redirects=False, client=("203.0.113.99", 1))
    assert _attempt(elsewhere, prefix + "z" * 35).status_code == 401
    assert security_log()[-1]["delay_s"] == QUICK.max_delay_s


def test_more_slowed_attempts_than_may_wait_at_once_are_refused(fleet, security_log):
    # given an address whose attempts each wait a minute
    console = console_for(fleet, POLICY, signin=ThrottlePolicy(free_failures=0,
                                                                max_delay_s=60))
    address = "203.0.113.50"
    app = create_app(console)

    async def scenario() -> tuple[int, str, int]:
        transport = httpx.ASGITransport(app=app, client=(address, 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as web:
            form = await web.get("/sign-in")
            csrf = csrf_of(form.text)

            def post(token: str) -> Any:
                return web.post("/sign-in", data={"csrf": csrf, "token": token})

            for _ in range(8):  # eight failures: the next wait is the minute
                console.throttle.failures.record(throttle_keys(address, "sft_prime"))
            waiting = [asyncio.create_task(post(f"sft_wait{i}" + "w" * 38))
                       for i in range(WAITING_PER_KEY)]
            keys = throttle_keys(address, "sft_any")
            while console.throttle.waiting(keys) < WAITING_PER_KEY:  # all of them asleep
                await asyncio.sleep(0.01)
            # when one more attempt of that address arrives
            refused = await post("sft_onemore" + "o" * 36)
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            return refused.status_code, refused.headers["retry-after"], \
                console.throttle.waiting(keys)

    status, retry_after, still_waiting = asyncio.run(scenario())
    # then it is refused at once with when to come back, and logged as throttled
    assert (status, retry_after) == (429, "60")
    (line,) = [e for e in security_log() if e["event"] == "signin_throttled"]
    assert line["client"] == address and line["status"] == 429
    # and the waits given up are no longer counted
    assert still_waiting == 0


# -- the security log of the gate and the pages, HSTS, the access log ---------------------

def test_csrf_refusals_401s_and_403s_are_each_a_line(fleet, console, browser, signed_in,
                                                      security_log):
    # a sign-in form posted without its double-submit token
    assert browser.post("/sign-in", data={"token": "sft_x"}).status_code == 403
    # a fragment asked for with no session
    assert browser.get("/queue/fragment").status_code == 401
    token = signed_in("audrey", ("auditor",))
    page = browser.get("/queue").text
    # a form with a wrong CSRF token, and one posted from another site
    assert browser.post("/actions/cancel", data={"csrf": "nope", "saga_id": "s"}
                        ).status_code == 403
    assert browser.post("/actions/cancel", data={"csrf": csrf_of(page), "saga_id": "s"},
                        headers={"origin": "https://evil.example"}).status_code == 403
    # an action the auditor's roles do not allow
    saga_id = start_waiting_capture(fleet)
    assert browser.post("/actions/cancel", data={
        "csrf": csrf_of(page), "saga_id": saga_id, "reason": "x", "expected_version": "2",
    }).status_code == 403
    lines = security_log()
    assert [(e["event"], e["status"]) for e in lines] == [
        ("csrf_refused", 403), ("unauthenticated", 401), ("csrf_refused", 403),
        ("csrf_refused", 403), ("forbidden", 403)]
    assert "principal" not in lines[0] and "principal" not in lines[1]
    assert {e["principal"] for e in lines[2:]} == {"audrey"}
    assert "auditor" in lines[-1]["reason"] and lines[-1]["path"] == "/actions/cancel"
    text = json.dumps(lines)
    assert token not in text
    assert all(value not in text for value in browser.cookies.values())


def test_https_answers_carry_hsts_and_plain_http_does_not(console) -> None:
    over_https = TestClient(create_app(console), base_url="https://testserver")
    over_http = TestClient(create_app(console), base_url="http://testserver")
    for path in ("/sign-in", "/static/console.js", "/no-such-page"):
        assert over_https.get(path).headers["strict-transport-security"] == HSTS
        assert "strict-transport-security" not in over_http.get(path).headers


def test_the_access_log_is_one_line_per_request_only_when_on(fleet, browser, caplog):
    token = token_for(fleet, "olivia", ("operator",))
    with caplog.at_level(logging.WARNING, logger=ACCESS_LOGGER):  # off: the default
        sign_in(browser, token)
        browser.get("/queue")
    assert not [r for r in caplog.records if r.name == ACCESS_LOGGER]
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        browser.get("/sagas?q=order-secret-key")
    (line,) = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert (line["method"], line["path"], line["status"]) == ("GET", "/sagas", 200)
    assert (line["tenant"], line["principal"]) == ("default", "olivia")
    assert "order-secret-key" not in json.dumps(line) and token not in json.dumps(line)


def test_a_nul_in_a_filter_is_invalid_input_that_does_not_echo_it(browser, signed_in):
    signed_in("olivia", ("operator",))
    for query in ("definition=trip%00MARK", "q=MARK%00", "status=MARK%00x"):
        answer = browser.get(f"/sagas?{query}")
        assert answer.status_code == 400, (query, answer.text[-300:])
        problem = answer.text[answer.text.index('role="alert"'):]
        assert "MARK" not in problem[:problem.index("</p>")]
