"""``sagafleet projector`` and ``sagafleet projections status|rebuild|serve-metrics``.

The projector and the metrics endpoint are long-running services: they migrate the schema at
start-up. ``projections status`` only reads and ``rebuild`` works on an already migrated
database; neither migrates.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

from application.principals.postgres import PostgresPrincipals
from events.integrity.anchors import AnchorLoop
from projections import (
    PROJECTIONS,
    ProjectionContext,
    Projector,
    exporter_app,
    projection_status,
    rebuild,
)
from projections.rebuild import RebuildProgress
from saga_core.limits import BATCH_EVENTS
from sagafleet import runtime
from sagafleet.anchor_key import anchor_key, anchor_witness
from sagafleet.commands.rendering import ProjectionStatusReport, RebuildSummary
from sagafleet.errors import UsageError
from sagafleet.exit_codes import ExitCode
from sagafleet.metrics_http import FleetOnly, MetricsHttpServer
from sagafleet.output import emit_report
from sagafleet.settings import Settings
from sagafleet.telemetry import start_telemetry

EXAMPLES = """examples:
  sagafleet projector --metrics-port 9464
  sagafleet projections status --json
  sagafleet projections rebuild sagas
"""


def register(sub: Any) -> None:
    """Add the projector and projections subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter
    projector = sub.add_parser(
        "projector", help="run every projection continuously", epilog=EXAMPLES, formatter_class=fmt
    )
    projector.add_argument("--batch", type=int, default=500, help="events per transaction")
    projector.add_argument(
        "--poll", type=float, default=1.0, help="seconds between polls when NOTIFY stays silent"
    )
    projector.add_argument(
        "--metrics-port", type=int, default=None,
        help="also serve Prometheus metrics on this port (every tenant's: a scrape carries a "
             "fleet_operator's token, 'Authorization: Bearer sft_…')"
    )
    projector.set_defaults(handler=run_projector)

    proj = sub.add_parser("projections", help="projection lag, rebuild, metrics endpoint",
                          epilog=EXAMPLES, formatter_class=fmt)
    proj_sub = proj.add_subparsers(dest="projections_command", required=True, metavar="ACTION")
    status = proj_sub.add_parser("status", help="table sets, checkpoints and lag")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(handler=run_status)
    rebuild_p = proj_sub.add_parser("rebuild", help="rebuild a projection blue/green from the log")
    rebuild_p.add_argument("name", nargs="?", default=None, help="one projection (default: all)")
    rebuild_p.add_argument("--batch", type=int, default=2000, help="events per transaction")
    rebuild_p.add_argument("--keep-old", action="store_true", help="keep the old table set")
    rebuild_p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                           help="processes folding the log in parallel (default: min(4, CPUs))")
    rebuild_p.add_argument("--json", action="store_true", help="print one JSON document")
    rebuild_p.set_defaults(handler=run_rebuild)
    serve = proj_sub.add_parser("serve-metrics", help="serve Prometheus metrics over HTTP (to "
                                "a fleet_operator's bearer token only)")
    serve.add_argument("--port", type=int, default=9464)
    serve.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a container's endpoint
    serve.set_defaults(handler=run_serve_metrics)


def _checked_batch(batch: int) -> int:
    """--batch: 1..batch_events events per transaction (a page held in memory at once)."""
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, not {batch}")
    BATCH_EVENTS.check("--batch", batch)
    return batch


def run_projector(args: argparse.Namespace, settings: Settings) -> int:
    """Run until SIGTERM/SIGINT."""
    _checked_batch(args.batch)
    start_telemetry(settings, "projector")
    with runtime.projector_side(settings) as ctx:
        projector = Projector(ctx, batch_size=args.batch, poll_s=args.poll).start()
        server = (_metrics_server(ctx, settings, "0.0.0.0", args.metrics_port).start()  # noqa: S104
                  if args.metrics_port else None)
        # Tamper evidence: checkpoints of the log, off the append path (events.integrity.anchors).
        anchors = (
            AnchorLoop(ctx.store, anchor_key(settings, create=True),
                       settings.anchor_interval_seconds, anchor_witness(settings)).start()
            if settings.anchor_interval_seconds > 0 else None
        )
        signal.signal(signal.SIGTERM, lambda *_: projector.stop_event.set())
        interrupted = False
        try:
            while not projector.stop_event.is_set():
                projector.wait(1.0)
        except KeyboardInterrupt:
            interrupted = True  # stopped cleanly below, then reported as Ctrl-C (130)
        finally:
            projector.stop()
            if anchors is not None:
                anchors.stop()
            if server is not None:
                server.close()
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """Show every projection's table sets and lag."""
    with runtime.read_side(settings) as ctx:
        report = ProjectionStatusReport(projection_status(ctx))
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def run_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    """Rebuild one projection (or all) while the system keeps running."""

    def progress(p: RebuildProgress) -> None:
        if not args.json:
            print(
                f"{p.name} v{p.version}: {p.events_applied} events applied,"
                f" {p.events_behind} behind, {p.elapsed_s:.1f}s",
                flush=True,
            )

    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    _checked_batch(args.batch)
    names = [args.name] if args.name else list(PROJECTIONS)
    with runtime.primary_side(settings) as ctx:  # a rebuild writes its table set
        reports = [
            rebuild(ctx, name, batch_size=args.batch, progress=progress, drop_old=not args.keep_old,
                    workers=args.workers)
            for name in names
        ]
    emit_report(RebuildSummary(reports), as_json=args.json)
    return ExitCode.OK


def _metrics_server(ctx: ProjectionContext, settings: Settings, host: str,
                    port: int) -> MetricsHttpServer:
    """The saga metrics endpoint, answering only to the fleet role's token."""
    return MetricsHttpServer(FleetOnly(exporter_app(ctx, settings.metrics_window_seconds),
                                       PostgresPrincipals(ctx.store)), host=host, port=port)


def run_serve_metrics(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the Prometheus endpoint in the foreground (a service: migrates at start-up)."""
    start_telemetry(settings, "metrics")
    with runtime.projector_side(settings) as ctx:
        server = _metrics_server(ctx, settings, args.host, args.port)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED
        finally:
            server.close()
    return ExitCode.OK
