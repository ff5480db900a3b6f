"""``sagafleet worker`` and ``sagafleet sweeper``: the long-running processes of the fleet."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from celery.signals import worker_init, worker_shutting_down
from prometheus_client import make_wsgi_app

from sagafleet.errors import UsageError
from sagafleet.example_sagas.registration import register_trip
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import build_fleet
from sagafleet.metrics_http import FleetOnly, MetricsHttpServer
from sagafleet.settings import Settings
from sagafleet.telemetry import start_telemetry
from workers.celery_app import QUEUE_COMMANDS, QUEUE_STEPS, worker_options
from workers.sweeper import Sweeper

NO_TOOL_SET = (
    "sagafleet worker: no tool set; give one with --tools MODULE:ATTRIBUTE or"
    " SAGAFLEET_TOOLS=MODULE:ATTRIBUTE (the demo's simulated providers:"
    " sagafleet.sandbox:trip_tool_set)"
)


def register(sub: Any) -> None:
    """Add the ``worker`` and ``sweeper`` subcommands."""
    worker = sub.add_parser("worker", help="run a Celery worker of the fleet")
    worker.add_argument("--concurrency", type=int, default=1,
                        help="tasks at once (1: solo pool; more: a thread pool)")
    worker.add_argument("--queues", default=f"{QUEUE_STEPS},{QUEUE_COMMANDS}",
                        help="comma-separated queues to consume")
    worker.add_argument("--loglevel", default="WARNING")
    worker.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics on this port (default"
                             " SAGAFLEET_WORKER_METRICS_PORT; 0: not served), to a"
                             " fleet_operator's bearer token only")
    worker.add_argument("--tools", default=None, metavar="MODULE:ATTRIBUTE",
                        help="the tool set to run (a workers.tools.ToolSet; default"
                             " SAGAFLEET_TOOLS; required: there is no default tool set)")
    worker.set_defaults(handler=run_worker)

    sweeper = sub.add_parser("sweeper", help="re-enqueue due work the log knows about")
    sweeper.add_argument("--interval", type=float, default=None,
                         help="seconds between sweeps (default SAGAFLEET_SWEEP_INTERVAL_SECONDS)")
    sweeper.add_argument("--once", action="store_true", help="sweep once and exit")
    sweeper.add_argument("--json", action="store_true", help="with --once: print the report")
    sweeper.add_argument("--heartbeat-file", type=Path, default=None, metavar="PATH",
                         help="touch PATH after every pass that reached the database (a "
                              "health check reads its age)")
    sweeper.set_defaults(handler=run_sweeper)


def run_worker(args: argparse.Namespace, settings: Settings) -> int:
    """Consume step and saga commands until stopped (SIGTERM: warm shutdown)."""
    if args.concurrency < 1:
        raise UsageError("sagafleet worker: --concurrency must be at least 1")
    port = settings.worker_metrics_port if args.metrics_port is None else args.metrics_port
    if not 0 <= port <= 65_535:
        raise UsageError(f"sagafleet worker: --metrics-port must be 0..65535, not {port}")
    tools = args.tools or settings.tools
    if tools is None:
        print(NO_TOOL_SET, file=sys.stderr)
        return ExitCode.USAGE
    start_telemetry(settings, "worker", args.loglevel)
    fleet = build_fleet(settings, tools=tools)
    # The example trip, only where this fleet can run its tools (the sandbox's; a
    # command line with no tool set checks against the example catalogue).
    register_trip(fleet)
    # solo or threads: one process, so its own registry holds every task's metrics (a
    # prefork pool would need prometheus_client's multiprocess mode instead).
    pool = "solo" if args.concurrency == 1 else "threads"
    watch = _WorkerWatch()
    worker_init.connect(watch.note_worker, weak=False)
    worker_shutting_down.connect(watch.note_shutdown, weak=False)
    endpoint = (MetricsHttpServer(FleetOnly(make_wsgi_app(fleet.metrics.registry),
                                            fleet.principals), port=port).start()
                if port else None)
    try:
        fleet.celery.worker_main([
            "worker", f"--pool={pool}", f"--concurrency={args.concurrency}",
            f"--queues={args.queues}", f"--loglevel={args.loglevel}",
            *worker_options(fleet.config.broker_settings),
            f"--hostname=sagafleet-{fleet.config.worker_id}",
        ])
    finally:
        worker_init.disconnect(watch.note_worker)
        worker_shutting_down.disconnect(watch.note_shutdown)
        if endpoint is not None:
            endpoint.close()
        fleet.close()
    return watch.exit_code()


class _WorkerWatch:
    """How Celery's worker stopped: its exit status, and whether SIGINT (Ctrl-C) stopped it.

    ``worker_main`` returns nothing: Celery's command ends in ``ctx.exit(worker.exitcode)``,
    which click, run with ``standalone_mode=False``, turns into a return value that
    ``Celery.start`` drops. A worker that stopped on an unrecoverable error (Celery logs it
    as CRITICAL and sets exit status 1) would then exit 0, and a supervisor that restarts on
    failure would leave it down. So the worker object is kept from ``worker_init`` and its
    ``exitcode`` read once it has stopped.
    """

    def __init__(self) -> None:
        self.worker: Any = None
        self.by_ctrl_c = False

    def note_worker(self, sender: Any = None, **_: Any) -> None:
        """``worker_init`` receiver: the worker being started."""
        self.worker = sender

    def note_shutdown(self, sig: str | None = None, **_: Any) -> None:
        """``worker_shutting_down`` receiver: remember a SIGINT."""
        if sig == "SIGINT":
            self.by_ctrl_c = True

    def exit_code(self) -> ExitCode:
        """``INTERRUPTED`` after Ctrl-C (Celery's warm shutdown answers Ctrl-C and SIGTERM
        alike, and gives Ctrl-C status 1); else ``FAILURE`` for a worker that stopped with a
        non-zero status (an unrecoverable error, a cold shutdown), ``OK`` otherwise."""
        if self.by_ctrl_c:
            return ExitCode.INTERRUPTED
        return ExitCode.FAILURE if getattr(self.worker, "exitcode", None) else ExitCode.OK


def run_sweeper(args: argparse.Namespace, settings: Settings) -> int:
    """Sweep forever (or once with --once)."""
    from sagafleet.output import emit

    start_telemetry(settings, "sweeper")
    fleet = build_fleet(settings)
    sweeper = Sweeper(fleet)
    try:
        if args.once:
            report = sweeper.sweep()
            emit(report.__dict__, as_json=args.json,
                 text=lambda d: ", ".join(f"{k}={v}" for k, v in d.items()))
            return ExitCode.OK
        sweeper.run_forever(args.interval or settings.sweep_interval_seconds,
                            heartbeat=args.heartbeat_file)
    finally:
        sweeper.close()
        fleet.close()
    return ExitCode.OK
