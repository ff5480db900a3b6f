"""``sagafleet demo``: the main job, on the embedded default unless URLs are configured."""

from __future__ import annotations

import argparse
from typing import Any

from sagafleet import demo, embedded_leases, runtime, sandbox
from sagafleet.errors import UsageError
from sagafleet.exit_codes import ExitCode
from sagafleet.migrate import migrate_all
from sagafleet.output import emit
from sagafleet.settings import Settings
from workers.fleet import Fleet, FleetConfig

CONSOLE_WAITING = 3
"""Trips ``--keep-servers`` leaves waiting for a person, for the operator console."""


def register(sub: Any) -> None:
    """Add the ``demo`` subcommand."""
    p = sub.add_parser(
        "demo",
        help="run trip sagas on a real fleet with injected faults and print a summary",
        description="Starts W worker processes and a sweeper, runs N trip sagas against the "
        "sandbox providers with faults injected at rate P, plays the operator for approvals "
        "as an approver it adds to the principal directory and authenticates by its API token "
        "(approves most, denies some, lets one expire), and checks the providers' ledgers for "
        "duplicate effects. Exit code 8 if any duplicate effect, broken invariant or "
        "unsettled saga is found.",
    )
    p.add_argument("--sagas", type=int, default=20, help="trip sagas to run (default 20)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--fault-rate", type=float, default=0.1,
                   help="probability that a provider call meets a fault (default 0.1)")
    p.add_argument("--seed", type=int, default=7, help="seed of the fault mix and the operator")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for the sagas")
    p.add_argument("--keep-servers", action="store_true",
                   help="leave the embedded PostgreSQL and Redis running afterwards, with "
                   f"{CONSOLE_WAITING} trips waiting for a person, and print how to open them "
                   "in the operator console (with the demo approver's new token)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=run_demo)


def _text(d: dict[str, Any]) -> str:
    lines = [
        f"{d['sagas']} trip sagas in {d['elapsed_s']} s ({d['sagas_per_s']} sagas/s)",
        "terminal states:",
        *(f"  {state:<24} {n}" for state, n in d["terminal_states"].items()),
        f"compensations run:        {d['compensations']}",
        f"reconciliations:          {d['reconciliations'] or 'none'}",
        f"approvals:                requested {d['approvals']['requested']}, granted "
        f"{d['approvals']['granted']}, denied {d['approvals']['denied']}",
        f"approved by:              {_approver(d['approvals']['approver'])}",
        f"faults injected:          {d['faults_injected'] or 'none'}",
        f"duplicate net effects:    {d['duplicate_effects']}  (from the providers' ledgers)",
        f"invariant violations:     {len(d['invariant_violations'])}",
        f"sagas not settled:        {d['non_terminal']}",
    ]
    for item in d["manual_intervention"]:
        lines.append(f"  manual intervention {item['saga_id']}: {item['reason']}")
    if "console" in d:
        lines += _console_text(d["console"], d.get("waiting_for_a_person") or [])
    return "\n".join(lines)


def _console_text(console: dict[str, Any], waiting: list[str]) -> list[str]:
    return [
        "",
        "the servers keep running; to act as the demo's person in the operator console:",
        f"  {console['command']}        # then open {console['url']}",
        f"  sign in as {console['principal']} (roles: {', '.join(console['roles'])}) with "
        "this token (shown once; `sagafleet principals rotate` issues another):",
        f"    {console['token']}",
        f"  {len(waiting)} trip(s) wait for a person in its queue; for an approved one to "
        "move on, run a worker and a sweeper too:",
        f"    {console['worker']}",
        f"    {console['sweeper']}",
    ]


def console_handoff(fleet: Fleet, settings: Settings) -> dict[str, Any]:
    """How a person continues in the console: the commands (with the demo's environment)
    and a fresh token of the demo's approver (the run's own token is not kept anywhere)."""
    issued = fleet.principals.rotate("default", demo.APPROVER)
    prefix = "" if settings.home == Settings().home else f"SAGAFLEET_HOME={settings.home} "
    return {
        "command": f"{prefix}sagafleet console",
        "url": "http://127.0.0.1:8080/",
        "principal": demo.APPROVER,
        "roles": sorted(issued.principal.roles),
        "token": issued.token,
        "worker": f"{prefix}SAGAFLEET_TOOLS={sandbox.TOOL_SET} sagafleet worker",
        "sweeper": f"{prefix}sagafleet sweeper",
    }


def _approver(approver: dict[str, Any]) -> str:
    proof = ("authenticated by its API token" if approver["authenticated"]
             else "NOT authenticated")
    return (f"{approver['kind']} {approver['name']!r} (roles: {', '.join(approver['roles'])}),"
            f" {proof}")


def run_demo(args: argparse.Namespace, settings: Settings) -> int:
    """Run the demo and report; fail loudly on a duplicate effect or an unsettled saga."""
    if args.sagas < 1 or args.workers < 1 or not 0.0 <= args.fault_rate <= 1.0:
        raise UsageError("sagafleet demo: --sagas and --workers must be >= 1, "
                         "--fault-rate within [0, 1]")
    options = demo.DemoOptions(sagas=args.sagas, workers=args.workers,
                               fault_rate=args.fault_rate, seed=args.seed,
                               timeout_s=args.timeout)
    if args.keep_servers:  # something for the person to do in the console afterwards
        options.waiting = CONSOLE_WAITING
    # A lease on the embedded servers: a second demo (or `sagafleet dev`) on this home keeps
    # them up until the last one leaves; servers that ran before any lease stay running.
    with embedded_leases.lease(settings.home, postgres=settings.embedded_database,
                               redis=settings.embedded_broker, keep=args.keep_servers):
        summary = _run(settings, options, keep_servers=args.keep_servers)
    emit(summary, as_json=args.json, text=_text)
    bad = summary["duplicate_effects"] or summary["invariant_violations"] or summary["non_terminal"]
    return ExitCode.INVARIANT_VIOLATED if bad else ExitCode.OK


def _run(settings: Settings, options: demo.DemoOptions, *, keep_servers: bool) -> dict[str, Any]:
    """The demo on a migrated fleet with the sandbox installed; its summary."""
    ends = runtime.endpoints(settings, need_broker=True)
    assert ends.broker_url is not None
    migrate_all(ends.database_url)
    sandbox.install(ends.database_url)
    trip = sandbox.open_trip_sandbox(ends.database_url)
    fleet = Fleet(FleetConfig(database_url=ends.database_url, broker_url=ends.broker_url,
                              lease_s=options.lease_s, queue_wait_s=options.queue_wait_s),
                  trip.tools)
    try:
        summary = demo.run(fleet, trip, demo.child_env(ends.database_url, ends.broker_url,
                                                       options),
                           options, settings.home / "demo-logs")
        if keep_servers:
            summary["console"] = console_handoff(fleet, settings)
    finally:
        fleet.close()
    return summary
