"""Chaos run: trip sagas and agent commands at load on a real fleet while its processes
and servers are abused.

    python scripts/chaos.py [--sagas N] [--workers W] [--duration S] [--seed K]
                            [--kill-every S] [--agent-share F] [--fault-rate P]
                            [--settle-timeout T] [--no-resend] [--broker-loss-is-violation]
                            [--keep-home] [--json]

It starts W ``sagafleet worker`` processes and one ``sagafleet sweeper`` on fresh embedded
servers and a fresh database. Over the first 60% of the run it starts N trip sagas: a share
(``--agent-share``) through ``sagafleet.commands.start_saga`` messages an agent publishes with
a bare Celery client and an idempotency key, the rest through the client API. The agent also
cancels sagas that wait for approval (``cancel_saga``) and submits plans (``submit_plan``),
throughout the run and through every outage, retrying a refused publish as an agent would.
Meanwhile, reproducibly for a seed, it SIGKILLs a worker every few seconds (and starts a
replacement), SIGSTOPs workers past their lease, restarts Redis empty and restarts PostgreSQL.
This process plays the operator: it answers approvals, each tenant's with a person of that
tenant (the first request is left to expire); answers the fleet refused are counted.

At the end it waits for quiescence and checks, set-based, from the log, the providers'
ledgers and Redis:

* every saga is terminal, or in MANUAL_INTERVENTION with evidence; the report groups
  those by the reason of their last escalation and its step, counted, with their tenants
  (``sagas.manual_intervention_reasons``), so a reader sees at once why they need a person;
* no duplicate net effect in any ledger, every saga's business invariant holds, and no
  ledger holds a saga the log does not know;
* every accepted command was acted on, or dead-lettered with a reason; otherwise it is
  *lost* (a violation), or *lost with the broker's state* when its message was in Redis as
  the run emptied it (Redis runs without persistence), or still pending in Redis. The agent
  follows the README's protocol for a broker that lost its memory: once it sees Redis
  restarted (a new ``run_id``) it resends every accepted command it does not yet see acting
  (as ``sagafleet find`` would show it); the report counts those resends, and a command the
  restart dropped that no resend repaired is a violation. With ``--no-resend`` the agent
  does not resend: the report then shows what a restart drops, counted apart and a
  violation only with ``--broker-loss-is-violation``;
* every process it did not kill survived every server restart;
* ``sagafleet verify`` finds no difference.

It prints tables (or one JSON document with ``--json``).
Server restarts need the embedded servers (the default); with ``SAGAFLEET_DATABASE_URL`` /
``SAGAFLEET_BROKER_URL`` set they are skipped and reported as such.

exit codes:
  0  no violation
  2  bad arguments (usage)
  8  invariant-violated: at least one violation (listed under "violations"; the logs of
     the run's processes are kept, their directory printed on stderr)
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

# Run as a file (python scripts/chaos.py): its directory, holding chaos_run, is on sys.path.
from chaos_run.report import render
from chaos_run.run import ChaosRun

from sagafleet import embedded
from sagafleet.exit_codes import ExitCode


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The run's parameters, checked."""
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     epilog=doc[doc.index("exit codes:"):],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sagas", type=int, default=50, help="trip sagas to start")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--duration", type=float, default=60.0,
                        help="seconds of chaos (sagas start during the first 60%%)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--kill-every", type=float, default=6.0,
                        help="seconds between worker SIGKILLs")
    parser.add_argument("--agent-share", type=float, default=0.5,
                        help="share of the sagas started by agent commands through Celery")
    parser.add_argument("--fault-rate", type=float, default=0.1,
                        help="share of provider calls meeting an injected fault")
    parser.add_argument("--settle-timeout", type=float, default=300.0)
    parser.add_argument("--review-every", type=float, default=0.5,
                        help="seconds between the operator's looks at pending approvals")
    parser.add_argument("--no-resend", action="store_true",
                        help="the agent does not resend after a Redis restart (to see what "
                             "a restart drops)")
    parser.add_argument("--broker-loss-is-violation", action="store_true",
                        help="with --no-resend: still count commands lost with an emptied "
                             "Redis as violations (always so without --no-resend)")
    parser.add_argument("--keep-home", action="store_true",
                        help="keep the run's home (logs, the embedded servers' data) and leave "
                             "its embedded servers running, to query the log afterwards; "
                             "their URLs are printed on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.sagas < 1 or args.workers < 1 or args.duration <= 0 or args.kill_every <= 0:
        parser.error("--sagas and --workers must be >= 1, --duration and --kill-every > 0")
    if not 0 <= args.agent_share <= 1:
        parser.error("--agent-share must be between 0 and 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print; exit 0 (clean) or 8 (INVARIANT_VIOLATED)."""
    args = parse_args(argv)
    # The operator's pool notices every PostgreSQL restart; the report says what matters.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    home = Path(tempfile.mkdtemp(prefix="sf-chaos-", dir="/tmp"))
    log_dir = home / "logs"
    log_dir.mkdir()
    run = ChaosRun(args, home, log_dir)
    try:
        report = run.run()
    finally:
        if run.embedded and not args.keep_home:
            embedded.stop_embedded(home)
    if args.keep_home:
        print(f"home kept in {home} (SAGAFLEET_HOME={home}); database "
              f"{getattr(run, 'database', '?')}; stop its servers with "
              f"SAGAFLEET_HOME={home} sagafleet embedded stop", file=sys.stderr)
    print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    if report["violations"]:
        print(f"\nlogs kept in {log_dir}", file=sys.stderr)
        return ExitCode.INVARIANT_VIOLATED
    if not args.keep_home:
        shutil.rmtree(home, ignore_errors=True)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
