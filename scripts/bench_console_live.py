"""Benchmark the console's live queue: how long from a saga asking for a person to the queue
fragment showing it, through the whole path a browser sees.

A fresh, migrated database; the console served by uvicorn in this process with its own
projector (as ``sagafleet console`` runs it); a signed-in client holding the event stream
(``GET /live``) open. Each round starts a saga whose first step needs an approval (the
start appends, NOTIFY wakes the projector and the hub), then waits for ``event: moved`` and
fetches ``/queue/fragment`` until it holds the new saga. Printed: the median and 90th
percentile of start -> fragment-with-the-entry, and of start -> the first ``moved`` event,
and the same-run ratio of the two (how much of the wait the fragment fetches add). Rounds
are ``--pause`` apart (untimed): the hub announces at most twice a second, so back-to-back
rounds would measure that bound rather than the arrival.

Usage: python scripts/bench_console_live.py [--rounds N] [--database-url URL] [--broker-url URL]
(the database is dropped afterwards; without URLs the embedded servers are used).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_databases import drop_database, new_database  # noqa: E402

from projections import Projector  # noqa: E402
from saga_core.access.roles import PrincipalKind  # noqa: E402
from sagafleet import embedded  # noqa: E402
from sagafleet.console.app import create_app  # noqa: E402
from sagafleet.console.service import console_for  # noqa: E402
from sagafleet.console.sessions import SessionPolicy  # noqa: E402
from sagafleet.example_sagas import trip_tool_catalogue  # noqa: E402
from sagafleet.migrate import migrate_all  # noqa: E402
from workers.fleet import Fleet, FleetConfig  # noqa: E402

try:
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

CAPTURE = {
    "name": "bench_capture", "version": 1,
    "input": {"amount": {"type": "number"}, "card_token": {"type": "string", "secret": True}},
    "steps": [{"id": "capture", "tool": "payments.capture", "version": 1,
               "semantics": "offsettable",
               "args": {"amount": "${input.amount}", "currency": "EUR",
                        "card_token": "${input.card_token}"},
               "approval": {"required": True},
               "compensation": {"tool": "payments.refund", "version": 1,
                                "args": {"capture_id": "${receipt.resource_id}",
                                         "amount": "${receipt.amount}",
                                         "currency": "${receipt.currency}"}}}],
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    """Run the rounds and print medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between rounds")
    parser.add_argument("--database-url", default=os.environ.get("SAGAFLEET_DATABASE_URL"),
                        help="a server whose database may create databases (default: embedded)")
    parser.add_argument("--broker-url", default=os.environ.get("SAGAFLEET_BROKER_URL"),
                        help="the Redis the starts publish to (default: embedded)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="sf-", dir="/tmp"))
    server = args.database_url or embedded.start_postgres(home).url
    broker = args.broker_url or embedded.start_redis(home).url
    url = new_database(server, "bench_live")
    try:
        run(url, broker, args.rounds, args.pause)
    finally:
        drop_database(server, url)
        if not (args.database_url and args.broker_url):
            embedded.stop_embedded(home)


def run(url: str, broker: str, rounds: int, pause: float) -> None:
    """Serve a console on a fresh database ``url`` and time ``rounds`` arrivals."""
    migrate_all(url)
    fleet = Fleet(FleetConfig(database_url=url, broker_url=broker), trip_tool_catalogue())
    console = console_for(fleet, SessionPolicy(idle=timedelta(hours=1)))
    projector = Projector(console.read, poll_s=1.0).start()
    admin = fleet.client_for(fleet.authenticate(
        fleet.principals.add("bench", "admin", PrincipalKind.PERSON, ["admin"]).token))
    admin.register_definition(CAPTURE)
    agent = fleet.client_for(fleet.authenticate(
        fleet.principals.add("bench", "bot", PrincipalKind.AGENT, ["agent"]).token))
    token = fleet.principals.add("bench", "ada", PrincipalKind.PERSON, ["approver"]).token

    port = _free_port()
    web = uvicorn.Server(uvicorn.Config(create_app(console), host="127.0.0.1", port=port,
                                       log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    while not web.started:
        time.sleep(0.05)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    form = client.get("/sign-in").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf, "no sign-in form"
    client.post("/sign-in", data={"csrf": csrf.group(1), "token": token})

    to_event: list[float] = []
    to_fragment: list[float] = []
    try:
        with client.stream("GET", "/live") as stream:
            lines = stream.iter_lines()
            next(lines)  # retry: / connected
            for index in range(rounds):
                time.sleep(pause)
                card = agent.put_secret(f"tok_{index}").as_input()
                began = time.perf_counter()
                saga_id = agent.start("bench_capture", {"amount": 10 + index,
                                                        "card_token": card}).saga_id
                first_event = None
                for line in lines:
                    if line != "event: moved":
                        continue
                    first_event = first_event or time.perf_counter()
                    if saga_id in client.get("/queue/fragment").text:
                        break
                to_fragment.append(time.perf_counter() - began)
                to_event.append((first_event or time.perf_counter()) - began)
    finally:
        client.close()
        web.should_exit = True
        thread.join(timeout=30)
        projector.stop()
        fleet.close()

    def line(name: str, values: list[float]) -> str:
        ordered = sorted(values)
        p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]  # nearest rank: never below the median
        return (f"{name:<36} median {statistics.median(values) * 1000:7.1f} ms   "
                f"p90 {p90 * 1000:7.1f} ms")

    print(f"{rounds} rounds, a saga asking for a person -> the console's queue")
    print(line("start -> first 'moved' event", to_event))
    print(line("start -> fragment shows the entry", to_fragment))
    print(f"ratio fragment/event (medians, same run): "
          f"{statistics.median(to_fragment) / statistics.median(to_event):.2f}")


if __name__ == "__main__":
    main()
