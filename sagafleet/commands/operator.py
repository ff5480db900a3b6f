"""``sagafleet queue|approve|deny|resolve|cancel``: what a person does about a saga.

``queue`` reads the operator queue (a read command: no migration, no broker). The others
record one typed operator event through the workers' SagaClient on an already migrated
database; a second identical click records nothing. Each acts as the principal its API
token proves (``--token-file PATH`` or ``SAGAFLEET_TOKEN``; :mod:`sagafleet.auth`): the
tenant and the recorded actor are the principal's, whatever else is typed. Which resolve
actions fit a paused saga is saga_core's rule (:mod:`saga_core.engine.resolution`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, cast

from application.client import SagaClient
from application.views import SagaView
from projections import operator_queue
from saga_core.contracts import StepKind
from saga_core.engine.events import OperatorActionName
from saga_core.engine.resolution import OPERATOR_ACTIONS, OperatorRequest
from saga_core.limits import INPUT_TEXT_BYTES, QUEUE_PAGE_ROWS
from sagafleet import runtime
from sagafleet.auth import add_token_option, cli_principal
from sagafleet.commands.rendering import QueueReport, ResolveReport, SagaReport
from sagafleet.commands.reports import reader
from sagafleet.errors import InvalidInput, UsageError
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import command_fleet
from sagafleet.json_arguments import json_argument
from sagafleet.output import emit_report
from sagafleet.settings import Settings

EXAMPLES = """examples:
  sagafleet queue
  export SAGAFLEET_TOKEN=sft_…        # issued by `sagafleet principals add`, shown once
  sagafleet approve 3f2c… capture_payment
  sagafleet resolve 3f2c… mark_compensated --step capture_payment --reason "refunded" \
      --token-file ~/.sagafleet-token
"""


def _common(parser: argparse.ArgumentParser) -> None:
    add_token_option(parser)
    parser.add_argument("--seen-version", "--expected-version", dest="seen_version",
                        type=int, default=None, metavar="N",
                        help="act only if the saga is still at the version you looked at "
                        "(`sagafleet status` shows it); else nothing is recorded (exit code "
                        "of a conflict). --expected-version: its old name, still accepted")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: Any) -> None:
    """Add the operator subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter
    queue = sub.add_parser("queue", help="the operator queue: what waits for a human",
                           epilog=EXAMPLES, formatter_class=fmt)
    add_token_option(queue)  # the queue of the token's tenant
    queue.add_argument("--limit", type=int, default=QUEUE_PAGE_ROWS.value,
                       help=f"at most this many entries, nearest deadline first "
                       f"(1..{QUEUE_PAGE_ROWS.value}, the default)")
    queue.add_argument("--json", action="store_true", help="print one JSON document")
    queue.set_defaults(handler=run_queue)

    for name, helptext in (("approve", "approve a pending step"), ("deny", "deny a pending step")):
        p = sub.add_parser(name, help=helptext, epilog=EXAMPLES, formatter_class=fmt)
        p.add_argument("saga_id")
        p.add_argument("step")
        p.add_argument("--compensation", action="store_true",
                       help="the request is for the step's compensation")
        if name == "approve":
            p.add_argument("--action-hash", default=None,
                           help="the action hash shown in the request (default: the pending one)")
            p.add_argument("--up-to", type=float, default=None, metavar="AMOUNT",
                           help="the largest amount of the gate's amount argument this grant "
                           "covers (default: exactly the amount requested)")
            p.add_argument("--reason", default="", help="why (recorded on the grant)")
        else:
            p.add_argument("--reason", required=True)
        _common(p)
        p.set_defaults(handler=run_approve if name == "approve" else run_deny)

    resolve = sub.add_parser("resolve", help="record a typed operator action on a paused saga",
                             epilog=EXAMPLES, formatter_class=fmt)
    resolve.add_argument("saga_id")
    resolve.add_argument("action", choices=OPERATOR_ACTIONS)
    resolve.add_argument("--reason", required=True, help="why (recorded on the event)")
    resolve.add_argument("--step", default=None, help="the step the action is about")
    resolve.add_argument(
        "--compensation", action="store_true", help="the action is about the step's compensation"
    )
    resolve.add_argument("--evidence", default=None,
                         help="what the operator checked, as a JSON object; @FILE reads it "
                              "from a file, - from stdin")
    _common(resolve)
    resolve.set_defaults(handler=run_resolve)

    cancel = sub.add_parser("cancel", help="cancel a saga: compensate what can be compensated")
    cancel.add_argument("saga_id")
    cancel.add_argument("--reason", default="")
    _common(cancel)
    cancel.set_defaults(handler=run_cancel)


def _kind(args: argparse.Namespace) -> StepKind:
    return StepKind.COMPENSATION if args.compensation else StepKind.FORWARD


def _act(
    args: argparse.Namespace, settings: Settings, action: Callable[[SagaClient], SagaView]
) -> int:
    """Run one client action as the token's principal, and show the saga after it."""
    fleet = command_fleet(settings)
    try:
        view = action(fleet.client_for(cli_principal(args, settings, fleet.principals)))
    finally:
        fleet.close()
    emit_report(SagaReport(view), as_json=args.json)
    return ExitCode.OK


def run_queue(args: argparse.Namespace, settings: Settings) -> int:
    """List the token's tenant's operator queue, nearest deadline first, one page of at
    most --limit."""
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, not {args.limit}")
    QUEUE_PAGE_ROWS.check("queue --limit", args.limit)
    with runtime.read_side(settings) as ctx:
        tenant = reader(args, settings, ctx, "the operator queue").tenant
        report = QueueReport(operator_queue(ctx, tenant=tenant, limit=args.limit))
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def run_approve(args: argparse.Namespace, settings: Settings) -> int:
    """Approve a pending request."""
    return _act(args, settings, lambda client: client.approve(
        args.saga_id, args.step, kind=_kind(args), action_hash=args.action_hash,
        up_to=args.up_to, reason=args.reason, seen_version=args.seen_version))


def run_deny(args: argparse.Namespace, settings: Settings) -> int:
    """Deny a pending request."""
    return _act(args, settings, lambda client: client.deny(
        args.saga_id, args.step, reason=args.reason, kind=_kind(args),
        seen_version=args.seen_version))


def run_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Request cancellation."""
    return _act(args, settings, lambda client: client.cancel(
        args.saga_id, reason=args.reason, seen_version=args.seen_version))


def run_resolve(args: argparse.Namespace, settings: Settings) -> int:
    """Record an operator action; the same action clicked again records nothing."""
    evidence = (json_argument(args.evidence, "--evidence", INPUT_TEXT_BYTES)
                if args.evidence else {})
    if not isinstance(evidence, dict):
        raise InvalidInput("--evidence must be a JSON object")
    fleet = command_fleet(settings)
    try:
        client = fleet.client_for(cli_principal(args, settings, fleet.principals))
        request = OperatorRequest(
            action=cast(OperatorActionName, args.action),  # argparse checked the choices
            actor=client.actor, reason=args.reason, step_id=args.step, kind=_kind(args),
            evidence=evidence,
        )
        report = _resolve(client, args.saga_id, request, args.seen_version)
    finally:
        fleet.close()
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def _resolve(client: SagaClient, saga_id: str, request: OperatorRequest,
             seen_version: int | None) -> ResolveReport:
    """Record the request through the client (saga_core's resolve rule decides); a second
    click on the same button records nothing and says so."""
    resolution = client.resolve(saga_id, request.action, step_id=request.step_id,
                                kind=request.kind, reason=request.reason,
                                evidence=dict(request.evidence),
                                seen_version=seen_version)
    return ResolveReport(saga_id, request.action, resolution.recorded is not None,
                         resolution.saga)
