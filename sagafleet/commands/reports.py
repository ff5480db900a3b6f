"""``sagafleet status|find|list|stats|alerts|audit|verify``: read commands.

They read the log and the read models of an already migrated database and change nothing:
no migration, no broker, no definition registered. On a database that was never migrated
they stop with DatabaseNotMigrated, which says to run ``sagafleet db migrate``.

Every one but ``verify`` shows one tenant's sagas and nothing of another's (another tenant's
saga is not found, as if absent): the tenant of the principal the command's API token
proves (``--token-file PATH`` or ``SAGAFLEET_TOKEN``; any role may read). ``verify`` is the
database administrator's check of the whole log: it reports on every tenant and takes no
token (it needs the database itself).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from application.principals.postgres import PostgresPrincipals
from application.views import view_of
from events import InvalidArgument
from events.eventstore.model import Position
from events.integrity.anchor_audit import keep_high_water_mark
from events.integrity.anchor_witness import AnchorWitnessError
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.streams import SagaNotFound
from projections import (
    AlertThresholds,
    ProjectionContext,
    SagaCursor,
    audit,
    business_alerts,
    collect_metrics,
    parse_position,
    saga_page,
    verify,
)
from projections.lineage import find_trace
from saga_core.access.roles import Action, Principal, check_permitted
from saga_core.agents.lineage import InvalidLineage, check_trace_id
from saga_core.contracts import SagaStatus
from saga_core.limits import KEY_CHARS, POSITION_MAX, SAGA_PAGE_ROWS
from sagafleet import runtime
from sagafleet.anchor_key import anchor_witness, integrity_checks
from sagafleet.auth import add_token_option, cli_principal
from sagafleet.commands.rendering import (
    AlertsReport,
    AuditView,
    SagaListReport,
    SagaReport,
    StatsReport,
    TraceView,
    VerifyView,
)
from sagafleet.errors import NotFound, UsageError
from sagafleet.exit_codes import ExitCode
from sagafleet.output import emit_report
from sagafleet.settings import Settings

DEFAULT_LIST_ROWS = 100
"""How many sagas one ``sagafleet list`` shows unless --limit says otherwise."""

EXAMPLES = """examples:
  export SAGAFLEET_TOKEN=sft_…        # issued by `sagafleet principals add`, shown once
  sagafleet status 3f2c… --json
  sagafleet find order-42
  sagafleet find --trace 4bf92f3577b34da6a3ce929d0e0e4736
  sagafleet list --status MANUAL_INTERVENTION --limit 20
  sagafleet stats
  sagafleet audit 3f2c… --at 1234 --json
  sagafleet verify
  sagafleet verify --expect-anchor 42:9f3c… --json
"""

VERIFY_DESCRIPTION = """Every read model equals a fresh fold of the log, every stream's hash chain
is intact, and the log still holds what its checkpoints anchored: no stream deleted, truncated,
rewritten or forged below a checkpoint, no checkpoint edited or deleted, every signature the
configured key's (SAGAFLEET_ANCHOR_KEY / _FILE). Exit 9 (log-tampered) names what was changed;
exit 7 (verify-failed) a read model that differs, a broken chain or a snapshot that is not
the fold it claims to be. The newest checkpoint a clean check found becomes the high-water
mark in SAGAFLEET_ANCHOR_WITNESS_FILE (SAGAFLEET_HOME/anchor.witness): from then on, that
checkpoint missing is a finding."""


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _reader(parser: argparse.ArgumentParser) -> None:
    """A read command of one tenant's sagas: the reader's token, and --json."""
    add_token_option(parser)
    _json_flag(parser)


def reader(
    args: argparse.Namespace, settings: Settings, ctx: ProjectionContext, what: str
) -> Principal:
    """The principal the command's token proves (``Unauthenticated``, exit 11, without one),
    allowed to read (``NotPermitted``, exit 12, otherwise); the command shows its tenant's
    sagas and nothing of another tenant's."""
    principal = cli_principal(args, settings, PostgresPrincipals(ctx.store))
    check_permitted(principal, Action.READ, what)
    return principal


def register(sub: Any) -> None:
    """Add the read subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter
    status = sub.add_parser("status", help="current state and steps of a saga",
                            epilog=EXAMPLES, formatter_class=fmt)
    status.add_argument("saga_id")
    status.add_argument("--fresh", action="store_true",
                        help="read from the primary, never the read replica: see what a "
                             "command just did (SAGAFLEET_READ_DATABASE_URL may lag)")
    _reader(status)
    status.set_defaults(handler=run_status)

    find = sub.add_parser("find", help="the saga this tenant started with an idempotency key, "
                          "or (--trace) every saga and event of a trace",
                          epilog=EXAMPLES, formatter_class=fmt)
    find.add_argument("key", nargs="?", default=None, help="the idempotency key given to start")
    find.add_argument("--trace", default=None, metavar="TRACE_ID",
                      help="a lineage trace id (32 hex digits): the sagas it started and all "
                           "their events, oldest first")
    _reader(find)
    find.set_defaults(handler=run_find)

    listing = sub.add_parser("list", help="this tenant's sagas, newest first, a page at a time",
                             epilog=EXAMPLES, formatter_class=fmt)
    listing.add_argument("--status", default=None, choices=[str(s) for s in SagaStatus],
                         help="only sagas in this state")
    listing.add_argument("--definition", default=None, metavar="NAME",
                         help="only sagas of this definition")
    listing.add_argument("--limit", type=int, default=DEFAULT_LIST_ROWS,
                         help=f"at most this many sagas (1..{SAGA_PAGE_ROWS.value}; "
                              f"{DEFAULT_LIST_ROWS})")
    listing.add_argument("--after", default=None, metavar="CURSOR",
                         help="the next page: the cursor the previous page printed")
    _reader(listing)
    listing.set_defaults(handler=run_list)

    stats = sub.add_parser("stats", help="saga metrics per definition and tool, and alerts")
    _reader(stats)
    stats.set_defaults(handler=run_stats)
    alerts = sub.add_parser("alerts", help="business-risk alerts")
    _reader(alerts)
    alerts.set_defaults(handler=run_alerts)

    audit_p = sub.add_parser(
        "audit", help="a saga's timeline from the log, checked as verify checks it",
        description="A saga's timeline and state from its log, with the checks verify makes"
                    " of it: its hash chain and head, its snapshot re-folded, and the"
                    " checkpoints that bear on it (the anchor key, the high-water mark and"
                    " SAGAFLEET_ANCHOR_MAX_AGE_SECONDS as verify uses them). Exit 9"
                    " (log-tampered) when the checkpoints say the log was changed, 7"
                    " (verify-failed) for a broken chain or a snapshot that is not its fold.",
        epilog=EXAMPLES, formatter_class=fmt)
    audit_p.add_argument("saga_id")
    audit_p.add_argument(
        "--at", default=None, help="fold only up to this global position (N or XID:N)"
    )
    _reader(audit_p)
    audit_p.set_defaults(handler=run_audit)

    verify_p = sub.add_parser(
        "verify",
        help="read models equal a fresh fold; chains intact; the log matches its checkpoints",
        description=VERIFY_DESCRIPTION, epilog=EXAMPLES, formatter_class=fmt)
    verify_p.add_argument(
        "--expect-anchor", default=None, metavar="SEQ:HASH",
        help="a checkpoint kept elsewhere (as `sagafleet anchor` printed it) that must still"
             " be there: catches the newest checkpoints deleted")
    _json_flag(verify_p)
    verify_p.set_defaults(handler=run_verify)


def saga_log(ctx: ProjectionContext, settings: Settings) -> PostgresSagaLog:
    """The saga log of a read command (it may keep a snapshot of a long saga it folds)."""
    return PostgresSagaLog(ctx.store, ctx.definitions, snapshot_every=settings.snapshot_every)


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """Show a saga, folded from its log (another tenant's saga is not found); with
    ``--fresh`` from the primary, so a saga a command just changed shows that change."""
    side = runtime.primary_side if args.fresh else runtime.read_side
    with side(settings) as ctx:
        tenant = reader(args, settings, ctx, f"saga {args.saga_id}").tenant
        loaded = saga_log(ctx, settings).load(args.saga_id, tenant=tenant)
    emit_report(SagaReport(view_of(loaded)), as_json=args.json)
    return ExitCode.OK


def run_find(args: argparse.Namespace, settings: Settings) -> int:
    """Show the saga the tenant started with an idempotency key (another tenant's is not
    found): the same fold as ``status``, of the saga the key names; with ``--trace``, the
    sagas and events of a lineage trace."""
    if (args.key is None) == (args.trace is None):
        raise UsageError("find takes an idempotency KEY or --trace TRACE_ID (one of the two)")
    if args.trace is not None:
        return _find_trace(args, settings)
    KEY_CHARS.check("find KEY", len(args.key))
    # Imported here: the client (orchestrator, secrets, input schemas) is the heaviest import
    # of the rooms, and no other read command needs it.
    from application.client import saga_id_for_key

    with runtime.read_side(settings) as ctx:
        tenant = reader(args, settings, ctx, "a saga").tenant
        try:
            loaded = saga_log(ctx, settings).load(saga_id_for_key(tenant, args.key), tenant=tenant)
        except SagaNotFound:
            raise NotFound(f"no saga was started with key {args.key!r} for this tenant") from None
    emit_report(SagaReport(view_of(loaded)), as_json=args.json)
    return ExitCode.OK


def _find_trace(args: argparse.Namespace, settings: Settings) -> int:
    try:
        trace_id = check_trace_id(args.trace, "--trace")
    except InvalidLineage as exc:
        raise UsageError(str(exc)) from None
    with runtime.read_side(settings) as ctx:
        tenant = reader(args, settings, ctx, "a trace").tenant
        report = find_trace(ctx, trace_id, tenant=tenant)
    if not report.events:
        raise NotFound(f"no saga of this tenant recorded trace {trace_id}")
    emit_report(TraceView(report), as_json=args.json)
    return ExitCode.OK


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    """List the tenant's sagas, newest first, one page of at most --limit."""
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, not {args.limit}")
    SAGA_PAGE_ROWS.check("list --limit", args.limit)
    after = SagaCursor.parse(args.after) if args.after else None
    status = SagaStatus(args.status) if args.status else None  # argparse checked the choices
    with runtime.read_side(settings) as ctx:
        tenant = reader(args, settings, ctx, "the saga list").tenant
        page = saga_page(ctx, tenant=tenant, limit=args.limit, status=status,
                         definition=args.definition, after=after)
    emit_report(SagaListReport(page), as_json=args.json)
    return ExitCode.OK


def run_stats(args: argparse.Namespace, settings: Settings) -> int:
    """Show the tenant's saga metrics and business-risk alerts."""
    with runtime.read_side(settings) as ctx:
        tenant = reader(args, settings, ctx, "the saga metrics").tenant
        report = StatsReport(collect_metrics(ctx, tenant=tenant),
                             business_alerts(ctx, tenant=tenant,
                                             thresholds=_alert_thresholds(settings)))
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def _alert_thresholds(settings: Settings) -> AlertThresholds:
    """The exporter's thresholds: ``executed_before_approval`` over the metrics window."""
    return AlertThresholds.for_window(settings.metrics_window_seconds)


def run_alerts(args: argparse.Namespace, settings: Settings) -> int:
    """Show the business-risk alerts on the tenant's sagas."""
    with runtime.read_side(settings) as ctx:
        tenant = reader(args, settings, ctx, "the alerts").tenant
        report = AlertsReport(business_alerts(ctx, tenant=tenant,
                                              thresholds=_alert_thresholds(settings)))
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def run_audit(args: argparse.Namespace, settings: Settings) -> int:
    """Print a saga's timeline (up to --at) and its state as of then (another tenant's saga
    is not found)."""
    at = _audit_position(args.at) if args.at else None
    checks = integrity_checks(settings)
    with runtime.read_side(settings) as ctx:
        tenant = reader(args, settings, ctx, f"saga {args.saga_id}").tenant
        report = audit(ctx, args.saga_id, at, tenant=tenant, checks=checks)
    emit_report(AuditView(report), as_json=args.json)
    if report.tampered:
        return ExitCode.LOG_TAMPERED
    return ExitCode.OK if report.ok else ExitCode.VERIFY_FAILED


def _audit_position(text: str) -> Position | int:
    """``--at``: a position N or XID:N, each number in 0..position_max (bigint), read
    without converting more digits than that range needs."""
    digits = len(str(POSITION_MAX.value))
    for part in text.split(":", 1):
        if len(part) > digits:  # refuses 10**5000 before int() converts it
            raise InvalidArgument(f"--at has a number of {len(part)} digits; the limit "
                                  f"{POSITION_MAX.name} is {POSITION_MAX.value}")
    try:
        at = parse_position(text)
    except ValueError:  # InvalidArgument (a ValueError) from XID:N, a plain one from int()
        raise InvalidArgument(f"--at wants a position N or XID:N, not {text!r}") from None
    numbers = (at.transaction_id, at.global_position) if isinstance(at, Position) else (at,)
    for number in numbers:
        if number < 0:
            raise InvalidArgument(f"--at wants a position N or XID:N, not {text!r}")
        POSITION_MAX.check("--at", number)
    return at


def run_verify(args: argparse.Namespace, settings: Settings) -> int:
    """Fold every saga afresh and compare with every read model; check every chain; check
    the log against its checkpoints. Exit 9 when the log was tampered with, else 7 on a
    difference."""
    expect = _expected_anchor(args.expect_anchor) if args.expect_anchor else None
    checks = integrity_checks(settings, expect=expect)
    with runtime.read_side(settings) as ctx:
        report = verify(ctx, checks=checks)
    emit_report(VerifyView(report), as_json=args.json)
    if report.anchors is not None:
        # The verifier's own record: the newest checkpoint it found whole becomes the mark.
        try:
            keep_high_water_mark(anchor_witness(settings), report.anchors)
        except AnchorWitnessError as exc:  # the check stands; only the record is not kept
            print(f"warning: {exc}", file=sys.stderr)
    if report.tampered:
        return ExitCode.LOG_TAMPERED
    return ExitCode.OK if report.ok else ExitCode.VERIFY_FAILED


def _expected_anchor(text: str) -> tuple[int, str]:
    seq, _, digest = text.partition(":")
    if not (seq.isascii() and seq.isdigit() and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise InvalidArgument(f"--expect-anchor wants SEQ:HASH (a number, 64 hex), not {text!r}")
    return int(seq), digest
