"""Failover run: trip sagas and signed agent commands on a fleet whose PostgreSQL fails over
to its standby and whose Redis fails over to its replica under Sentinel, mid-run.

    python scripts/failover.py [--replication sync|async] [--sagas N] [--workers W]
                               [--duration S] [--seed K] [--agent-share F] [--fault-rate P]
                               [--detect-s S] [--settle-timeout T] [--keep-home] [--json]

On loopback, from the machine's own binaries, it starts a PostgreSQL primary and a standby
streaming from it (``pg_basebackup -R``; with ``--replication sync`` the primary names it in
``synchronous_standby_names`` with ``synchronous_commit = on``), a third PostgreSQL for the
providers' ledgers (outside systems: they must outlive the failover), and a Redis master with
a replica and three Sentinels. The fleet -- W workers, a sweeper and a projector taking
anchors -- gets the multi-host URL (``target_session_attrs=read-write``) and the Sentinel
URL. Over the first 70% of the run it starts N trip sagas, a share through signed
``sagafleet.commands.start_saga`` messages an agent publishes through Sentinel (plus cancels
and plans), the rest through the client API.

At 30% of the run the standby falls behind (the primary's WAL sender paused for
``--lag-s`` seconds, as over a congested link), then every process of the PostgreSQL
primary is frozen and SIGKILLed and, after ``--detect-s`` seconds, the standby is
promoted; at 60% it SIGKILLs the Redis master and waits
for the Sentinels to promote the replica. Nothing is restarted: every process of the fleet
must carry on against the new servers. Callers follow the README's protocol for an
asynchronous standby: the direct client starts again, by key, each acknowledged start the
new primary lacks, and the agent re-checks its accepted commands and resends what is not
acting (it also does so when it sees the broker's master change).

It then waits for quiescence and reports: sagas settled and unsettled, duplicate net effects
and invariant violations (from the ledgers), agent commands lost, events the old primary had
acknowledged (a witness polled it until the kill) that the new one lacks, acknowledged
starts that had to be started again, and ``sagafleet verify``. With synchronous replication
every one of those must be 0 and verify clean; with asynchronous replication the lost tail
is counted, and everything else must still be 0.

exit codes:
  0  no violation
  2  bad arguments (usage)
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP): every server and process it started is stopped
  8  invariant-violated: at least one violation (listed under "violations"; the logs of
     the run's processes are kept, their directory printed on stderr)
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

# Run as a file (python scripts/failover.py): its directory, holding the run's package, is
# on sys.path.
from failover_run.report import render
from failover_run.run import FailoverRun
from failover_run.servers import Servers

from sagafleet.exit_codes import ExitCode


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The run's parameters, checked."""
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     epilog=doc[doc.index("exit codes:"):],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replication", choices=("sync", "async"), default="sync",
                        help="how the standby replicates (default: sync)")
    parser.add_argument("--sagas", type=int, default=50, help="trip sagas to start")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--duration", type=float, default=40.0,
                        help="seconds of the run (sagas start during the first 70%%)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--agent-share", type=float, default=0.5,
                        help="share of the sagas started by agent commands through Celery")
    parser.add_argument("--fault-rate", type=float, default=0.05,
                        help="share of provider calls meeting an injected fault")
    parser.add_argument("--detect-s", type=float, default=1.0,
                        help="seconds between the primary's death and the promotion")
    parser.add_argument("--lag-s", type=float, default=1.0,
                        help="seconds the primary's WAL sender is paused right before the "
                             "primary dies (a standby behind: what asynchronous replication "
                             "then loses)")
    parser.add_argument("--settle-timeout", type=float, default=300.0)
    parser.add_argument("--review-every", type=float, default=0.5,
                        help="seconds between the operator's looks at pending approvals")
    parser.add_argument("--keep-home", action="store_true",
                        help="keep the run's directory (servers' data and logs); the servers "
                             "are stopped either way")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.sagas < 1 or args.workers < 1 or args.duration <= 0 or min(args.detect_s,
                                                                         args.lag_s) < 0:
        parser.error("--sagas and --workers must be >= 1, --duration > 0, --detect-s and "
                     "--lag-s >= 0")
    if not 0 <= args.agent_share <= 1 or not 0 <= args.fault_rate <= 1:
        parser.error("--agent-share and --fault-rate must be between 0 and 1")
    return args


def _stop_on_signal(signum: int, frame: FrameType | None) -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so every server and process is stopped."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print; exit 0 (clean) or 8 (INVARIANT_VIOLATED)."""
    args = parse_args(argv)
    # The fleet's pools log every lost connection; the report says what matters.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)
    home = Path(tempfile.mkdtemp(prefix="sf-failover-", dir="/tmp"))
    log_dir = home / "logs"
    log_dir.mkdir()
    run = FailoverRun(args, home, log_dir)
    try:
        with Servers(home / "servers", args.replication) as servers:
            report = run.run_on(servers)
    except KeyboardInterrupt:
        # Unwound through every finally: the fleet's processes and the servers are stopped.
        print(f"interrupted; every server and process stopped (logs in {log_dir})",
              file=sys.stderr)
        return ExitCode.INTERRUPTED
    print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    if report["violations"]:
        print(f"\nlogs kept in {log_dir}", file=sys.stderr)
        return ExitCode.INVARIANT_VIOLATED
    if args.keep_home:
        print(f"run directory kept in {home}", file=sys.stderr)
    else:
        shutil.rmtree(home, ignore_errors=True)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
