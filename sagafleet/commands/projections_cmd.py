"""``sagafleet projector|projections|queue|resolve|stats|alerts|audit|verify``.

The read side of the fleet: run the projections, look at what they show, prove they agree
with the log. ``resolve`` composes the projections room (is this a repeated click?) with
the workers' SagaClient (record the operator action as an event).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from projections import (
    OPERATOR_ACTIONS,
    MetricsServer,
    ProjectionContext,
    Projector,
    audit,
    business_alerts,
    collect_metrics,
    is_repeated_action,
    operator_queue,
    parse_position,
    projection_status,
    rebuild,
    verify,
)
from projections.rebuild import RebuildProgress
from saga_core.contracts import StepKind
from sagafleet import runtime
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import build_fleet
from sagafleet.migrate import migrate_all
from sagafleet.output import emit, emit_error
from sagafleet.settings import Settings

EXAMPLES = """examples:
  sagafleet projector --metrics-port 9464
  sagafleet projections status --json
  sagafleet projections rebuild sagas
  sagafleet queue
  sagafleet resolve 3f2c… mark_compensated --step capture_payment --as ada --reason "refunded"
  sagafleet audit 3f2c… --at 1234 --json
  sagafleet verify
"""


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: Any) -> None:
    """Add the read-side subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter
    projector = sub.add_parser(
        "projector", help="run every projection continuously", epilog=EXAMPLES, formatter_class=fmt
    )
    projector.add_argument("--batch", type=int, default=500, help="events per transaction")
    projector.add_argument(
        "--poll", type=float, default=1.0, help="seconds between polls when NOTIFY stays silent"
    )
    projector.add_argument(
        "--metrics-port", type=int, default=None, help="also serve Prometheus metrics on this port"
    )
    projector.set_defaults(handler=run_projector)

    proj = sub.add_parser("projections", help="projection lag, rebuild, metrics endpoint")
    proj_sub = proj.add_subparsers(dest="projections_command", required=True, metavar="ACTION")
    status = proj_sub.add_parser("status", help="table sets, checkpoints and lag")
    _json_flag(status)
    status.set_defaults(handler=run_status)
    rebuild_p = proj_sub.add_parser("rebuild", help="rebuild a projection blue/green from the log")
    rebuild_p.add_argument("name", nargs="?", default=None, help="one projection (default: all)")
    rebuild_p.add_argument("--batch", type=int, default=2000, help="events per transaction")
    rebuild_p.add_argument("--keep-old", action="store_true", help="keep the old table set")
    rebuild_p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                           help="processes folding the log in parallel (default: min(4, CPUs))")
    _json_flag(rebuild_p)
    rebuild_p.set_defaults(handler=run_rebuild)
    serve = proj_sub.add_parser("serve-metrics", help="serve Prometheus metrics over HTTP")
    serve.add_argument("--port", type=int, default=9464)
    serve.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a container's endpoint
    serve.set_defaults(handler=run_serve_metrics)

    queue = sub.add_parser("queue", help="the operator queue: what waits for a human")
    queue.add_argument("--tenant", default=None, help="only this tenant's sagas")
    _json_flag(queue)
    queue.set_defaults(handler=run_queue)

    resolve = sub.add_parser("resolve", help="record a typed operator action on a paused saga")
    resolve.add_argument("saga_id")
    resolve.add_argument("action", choices=OPERATOR_ACTIONS)
    resolve.add_argument("--as", dest="actor", required=True, help="the operator's identity")
    resolve.add_argument("--reason", required=True, help="why (recorded on the event)")
    resolve.add_argument("--step", default=None, help="the step the action is about")
    resolve.add_argument(
        "--compensation", action="store_true", help="the action is about the step's compensation"
    )
    resolve.add_argument("--evidence", default=None, help="what the operator checked, as JSON")
    resolve.add_argument("--tenant", default=None)
    _json_flag(resolve)
    resolve.set_defaults(handler=run_resolve)

    stats = sub.add_parser("stats", help="saga metrics per definition and tool, and alerts")
    _json_flag(stats)
    stats.set_defaults(handler=run_stats)
    alerts = sub.add_parser("alerts", help="business-risk alerts")
    _json_flag(alerts)
    alerts.set_defaults(handler=run_alerts)

    audit_p = sub.add_parser("audit", help="a saga's timeline from the log, hash chain checked")
    audit_p.add_argument("saga_id")
    audit_p.add_argument(
        "--at", default=None, help="fold only up to this global position (N or XID:N)"
    )
    _json_flag(audit_p)
    audit_p.set_defaults(handler=run_audit)

    verify_p = sub.add_parser("verify", help="every read model equals a fresh fold of the log")
    _json_flag(verify_p)
    verify_p.set_defaults(handler=run_verify)


@contextmanager
def _context(settings: Settings) -> Iterator[ProjectionContext]:
    url = runtime.database_url(settings)
    migrate_all(url)
    with ProjectionContext.connect(url) as ctx:
        yield ctx


def run_projector(args: argparse.Namespace, settings: Settings) -> int:
    """Run until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO)
    with _context(settings) as ctx:
        projector = Projector(ctx, batch_size=args.batch, poll_s=args.poll).start()
        server = MetricsServer(ctx, port=args.metrics_port).start() if args.metrics_port else None
        signal.signal(signal.SIGTERM, lambda *_: projector.stop_event.set())
        try:
            while not projector.stop_event.is_set():
                projector.wait(1.0)
        except KeyboardInterrupt:
            pass
        finally:
            projector.stop()
            if server is not None:
                server.close()
    return ExitCode.OK


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """Show every projection's table sets and lag."""
    with _context(settings) as ctx:
        report = [
            {**asdict(s), "lag": asdict(s.lag) if s.lag else None} for s in projection_status(ctx)
        ]

    def text(doc: list[dict[str, Any]]) -> str:
        lines = []
        for p in doc:
            lines.append(f"{p['name']}: active v{p['active_version']}")
            for t in p["table_sets"]:
                lines.append(
                    f"  v{t['version']} {t['status']:<9} checkpoint {t['checkpoint']}"
                    f"  behind {t['events_behind']} events"
                    f" / {t['seconds_behind']:.1f}s"
                )
        return "\n".join(lines)

    emit(report, as_json=args.json, text=text)
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

    from projections import PROJECTIONS

    if args.workers < 1:
        emit_error("--workers must be at least 1", as_json=args.json, kind="Usage")
        return ExitCode.USAGE
    names = [args.name] if args.name else list(PROJECTIONS)
    with _context(settings) as ctx:
        reports = [
            rebuild(ctx, name, batch_size=args.batch, progress=progress, drop_old=not args.keep_old,
                    workers=args.workers)
            for name in names
        ]
    doc = [{**asdict(r), "events_per_s": round(r.events_per_s, 1)} for r in reports]
    emit(
        doc,
        as_json=args.json,
        text=lambda d: "\n".join(
            f"{r['name']}: v{r['old_version']} -> v{r['new_version']}, {r['events_applied']} events"
            f" in {r['elapsed_s']:.1f}s ({r['events_per_s']} events/s)"
            for r in d
        ),
    )
    return ExitCode.OK


def run_serve_metrics(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the Prometheus endpoint in the foreground."""
    with _context(settings) as ctx:
        server = MetricsServer(ctx, host=args.host, port=args.port)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.close()
    return ExitCode.OK


def run_queue(args: argparse.Namespace, settings: Settings) -> int:
    """List the operator queue, nearest deadline first."""
    with _context(settings) as ctx:
        entries = [asdict(e) for e in operator_queue(ctx, tenant=args.tenant)]

    def text(doc: list[dict[str, Any]]) -> str:
        if not doc:
            return "the operator queue is empty"
        lines = []
        for e in doc:
            ev = e["evidence"]
            lines.append(
                f"{e['saga_id']}  {e['entry']}  {e['step_id']}/{e['kind']}"
                f"  deadline {e['deadline']}"
            )
            lines.append(f"    reason: {e['reason']}")
            for key in (
                "intended_action",
                "affected_resource",
                "expected_result",
                "residual_risk",
                "alternatives",
            ):
                if ev.get(key):
                    lines.append(f"    {key.replace('_', ' ')}: {ev[key]}")
        return "\n".join(lines)

    emit(entries, as_json=args.json, text=text)
    return ExitCode.OK


def run_resolve(args: argparse.Namespace, settings: Settings) -> int:
    """Record an operator action; the same action clicked again records nothing."""
    try:
        evidence = json.loads(args.evidence) if args.evidence else {}
    except json.JSONDecodeError as exc:
        emit_error(f"--evidence is not JSON: {exc}", as_json=args.json, kind="InvalidInput")
        return ExitCode.INVALID_INPUT
    if not isinstance(evidence, dict):
        emit_error("--evidence must be a JSON object", as_json=args.json, kind="InvalidInput")
        return ExitCode.INVALID_INPUT
    kind = StepKind.COMPENSATION if args.compensation else StepKind.FORWARD
    tenant = args.tenant or settings.tenant
    fleet = build_fleet(settings)
    try:
        fleet.register_builtin_definitions()
        client = fleet.client(tenant=tenant, actor=args.actor)
        loaded = fleet.repo.load(args.saga_id, tenant=tenant)
        if is_repeated_action(loaded.state, loaded.events, args.action, args.step, kind):
            recorded, view = False, client.status(args.saga_id)
        elif loaded.state.escalation is None:
            emit_error(
                f"saga {args.saga_id} is {loaded.state.status}, not waiting for an operator",
                as_json=args.json,
                kind="NothingToResolve",
            )
            return ExitCode.CONFLICT
        else:
            view = client.resolve(
                args.saga_id,
                args.action,
                step_id=args.step,
                kind=kind,
                reason=args.reason,
                evidence=evidence,
            )
            recorded = True
    finally:
        fleet.close()
    doc = {
        "saga_id": args.saga_id,
        "action": args.action,
        "recorded": recorded,
        "saga": view.model_dump(mode="json"),
    }
    emit(
        doc,
        as_json=args.json,
        text=lambda d: (
            f"{d['action']} recorded on saga {d['saga_id']}; now {d['saga']['status']}"
            if d["recorded"]
            else f"{d['action']} was already recorded; nothing to do"
        ),
    )
    return ExitCode.OK


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def run_stats(args: argparse.Namespace, settings: Settings) -> int:
    """Show the saga metrics and the business-risk alerts."""
    with _context(settings) as ctx:
        doc = {
            "metrics": asdict(collect_metrics(ctx)),
            "alerts": [asdict(a) for a in business_alerts(ctx)],
        }

    def text(d: dict[str, Any]) -> str:
        lines = []
        for m in d["metrics"]["definitions"]:
            ops = m["operations"]
            lines += [
                f"{m['definition']}: {m['sagas']} sagas, {m['finished']} finished,"
                f" {m['waiting_for_operator']} waiting for an operator",
                f"  completed {_pct(m['completion_rate'])}  compensated"
                f" {_pct(m['compensation_rate'])}  partially"
                f" {_pct(m['partial_compensation_rate'])}  manual"
                f" {_pct(m['manual_intervention_rate'])}",
                f"  ambiguous {_pct(ops['ambiguous_outcome_rate'])}  reconciled"
                f" {_pct(ops['reconciliation_success_rate'])}  duplicate effects"
                f" {ops['duplicate_effect_incidents']}  retry amplification"
                f" {ops['retry_amplification']:.2f}",
                f"  forward p50/p95 {ops['forward_latency_p50_s']}/{ops['forward_latency_p95_s']}s"
                f"  compensation p50/p95 {ops['compensation_latency_p50_s']}/"
                f"{ops['compensation_latency_p95_s']}s",
                f"  invariant restored p50/p95 {m['invariant_restore_p50_s']}/"
                f"{m['invariant_restore_p95_s']}s  oldest unfinished"
                f" {m['stuck_saga_max_age_s']:.0f}s",
            ]
        for t in d["metrics"]["tools"]:
            ops = t["operations"]
            lines.append(
                f"  tool {t['tool']} ({t['kind']}): {ops['operations_started']} ops,"
                f" ambiguous {_pct(ops['ambiguous_outcome_rate'])}, duplicates"
                f" {ops['duplicate_effect_incidents']}, amplification"
                f" {ops['retry_amplification']:.2f}"
            )
        lines += [
            f"ALERT [{a['severity']}] {a['kind']}: {a['message']} ({a['saga_id']})"
            for a in d["alerts"]
        ]
        return "\n".join(lines) or "no sagas yet"

    emit(doc, as_json=args.json, text=text)
    return ExitCode.OK


def run_alerts(args: argparse.Namespace, settings: Settings) -> int:
    """Show the business-risk alerts."""
    with _context(settings) as ctx:
        doc = [asdict(a) for a in business_alerts(ctx)]
    emit(
        doc,
        as_json=args.json,
        text=lambda d: (
            "\n".join(f"[{a['severity']}] {a['kind']}: {a['message']} ({a['saga_id']})" for a in d)
            or "no alerts"
        ),
    )
    return ExitCode.OK


def run_audit(args: argparse.Namespace, settings: Settings) -> int:
    """Print a saga's timeline (up to --at) and its state as of then."""
    at = parse_position(args.at) if args.at else None
    with _context(settings) as ctx:
        report = audit(ctx, args.saga_id, at)
    doc = asdict(report)

    def text(d: dict[str, Any]) -> str:
        chain = "intact" if d["chain_ok"] else f"BROKEN ({d['chain_break']})"
        lines = [f"saga {d['saga_id']}: {d['events_total']} events, hash chain {chain}"]
        for e in d["timeline"]:
            extra = " ".join(f"{k}={e[k]}" for k in ("step_id", "kind", "actor") if e[k])
            lines.append(
                f"  v{e['stream_version']:<3} @{e['global_position']:<8} {e['at']}"
                f"  {e['type']:<26} {extra}  #{e['event_hash'][:12]}"
            )
        if d["state"]:
            s = d["state"]["summary"]
            lines.append(f"state as of {d['at'] or 'now'}: {s['state']} (v{s['stream_version']})")
        return "\n".join(lines)

    emit(doc, as_json=args.json, text=text)
    return ExitCode.OK if report.chain_ok else ExitCode.VERIFY_FAILED


def run_verify(args: argparse.Namespace, settings: Settings) -> int:
    """Fold every saga afresh and compare with every read model; check every chain."""
    with _context(settings) as ctx:
        report = verify(ctx)
    doc = {**asdict(report), "ok": report.ok}

    def text(d: dict[str, Any]) -> str:
        lines = [
            f"{d['projection']} v{d['version']}: {d['sagas_checked']} sagas,"
            f" {d['streams_checked']} streams, {d['broken_chains']} broken chains,"
            f" {len(d['lagging'])} lagging"
        ]
        for diff in d["differences"]:
            column = f".{diff['column']}" if diff["column"] else ""
            lines.append(
                f"  {diff['saga_id']} {diff['table']}[{diff['key']}]{column}:"
                f" {diff['problem']} (log {diff['expected']!r},"
                f" read model {diff['actual']!r})"
            )
        lines.append("OK" if d["ok"] else f"{len(d['differences'])} differences")
        return "\n".join(lines)

    emit(doc, as_json=args.json, text=text)
    return ExitCode.OK if report.ok else ExitCode.VERIFY_FAILED
