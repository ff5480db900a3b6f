"""How long a 100-saga trip run with injected faults takes on ``sagafleet.testing.TestFleet``.

No PostgreSQL, no Redis: the whole fleet — client, orchestrator, executor, sweeper passes —
runs in this process on the in-memory log, the in-memory trip tools and a test clock.
Each saga meets one fault drawn (reproducibly, per ``--seed``) from the sandbox's mix, or
none; the run plays out every retry, lease and commit horizon with ``advance``. Prints the
median wall time of ``--runs`` runs, with the outcome of the last one (terminal states,
effects counted in the books, duplicates) so a fast but wrong run is visible.

    python scripts/bench_testkit.py --sagas 100 --runs 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sagafleet.testing import TestFleet, TripTools  # noqa: E402

TRIP_INPUT: dict[str, Any] = {
    "customer_email": "ada@example.com", "flight_id": "FL123", "hotel_id": "HT456",
    "nights": 2, "amount": 42_000, "currency": "EUR", "card_token": "tok_visa_4242",
}
BOUNCING_INPUT = {**TRIP_INPUT, "customer_email": "ada@bounce.invalid"}  # unwinds at the pivot
Rule = tuple[str, str, dict[str, Any]]  # (tool, fault, params)
# What a faulty saga may meet: its rules, and whether it unwinds (so compensations run).
SCENARIOS: list[tuple[tuple[Rule, ...], bool]] = [
    ((("flights.hold", "fail_before_commit", {}),), False),
    ((("flights.hold", "timeout_before_dispatch", {}),), False),
    ((("hotels.hold", "commit_then_timeout", {}),), False),
    ((("hotels.hold", "slow_visibility", {"delay_s": 1.0}),
      ("hotels.hold", "commit_then_timeout", {})), False),
    ((("hotels.hold", "worker_crash_after_commit", {}),), False),
    ((("payments.capture", "commit_then_timeout", {}),), False),
    ((("payments.capture", "business_rejection", {}),), False),
    ((("payments.capture", "commit_then_timeout", {}),
      ("payments.capture", "lookup_unavailable", {"times": None})), False),
    ((("email.send_itinerary", "timeout_before_dispatch", {}),), False),
    ((), True),
    ((("flights.release", "compensation_failure", {}),), True),
    ((("hotels.release", "target_changed", {}),), True),
    ((("payments.refund", "commit_then_timeout", {}),), True),
]


def run(sagas: int, fault_rate: float, seed: int) -> tuple[float, dict[str, Any]]:
    """One run: start ``sagas`` trips, arm their faults, play everything out."""
    draw = random.Random(seed)
    began = time.perf_counter()
    fleet = TestFleet()
    tools = fleet.tools
    assert isinstance(tools, TripTools)
    client = fleet.client(tenant="bench")
    ids = []
    for n in range(sagas):
        rules, unwinds = draw.choice(SCENARIOS) if draw.random() < fault_rate else ((), False)
        trip = BOUNCING_INPUT if unwinds else TRIP_INPUT
        saga_id = client.start("trip", trip, key=f"bench-{n}").saga_id
        ids.append(saga_id)
        for tool, fault, params in rules:
            options = dict(params)
            times = options.pop("times", 1)
            tools.fail_next(tool, fault, times, saga_id=saga_id, **options)
    fleet.run_until_idle()
    fleet.advance(600)  # backoffs, leases, lookups and commit horizons play out
    elapsed = time.perf_counter() - began
    states = [fleet.state(saga_id).status for saga_id in ids]
    ledgers = [tools.ledger(saga_id) for saga_id in ids]
    summary = {
        "states": dict(Counter(state.value for state in states)),
        "faults_fired": len(tools.fired),
        "events": sum(len(fleet.events(saga_id)) for saga_id in ids),
        "duplicate_effects": sum(len(ledger.duplicates) for ledger in ledgers),
        # A saga waiting for a human may hold a trip half done; a finished one may not.
        "finished_without_trip_invariant": sum(
            state.is_terminal and not ledger.holds_trip_invariant
            for state, ledger in zip(states, ledgers, strict=True)),
    }
    return elapsed, summary


def _refuse_connections() -> None:
    """Make any network connection fail loudly: the run must need no server at all."""
    import socket

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("TestFleet tried to open a network connection")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]


def main() -> int:
    """Run the benchmark and print the median (and the last run's outcome)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sagas", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fault-rate", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    _refuse_connections()
    times: list[float] = []
    summary: dict[str, Any] = {}
    for n in range(args.runs):
        elapsed, summary = run(args.sagas, args.fault_rate, args.seed + n)
        times.append(elapsed)
    report = {"sagas": args.sagas, "runs": args.runs, "fault_rate": args.fault_rate,
              "median_s": round(statistics.median(times), 3),
              "runs_s": [round(t, 3) for t in times], "last_run": summary}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{args.sagas} trip sagas, fault rate {args.fault_rate}, {args.runs} runs"
              " (network connections refused):"
              f" median {report['median_s']} s (runs: {report['runs_s']})")
        print(f"last run: {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
