"""``sagafleet register|start|status|approve|deny|cancel``: saga commands for agents."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from saga_core.contracts import StepKind
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import build_fleet
from sagafleet.output import emit, emit_error
from sagafleet.settings import Settings
from workers.client import SagaClient
from workers.views import SagaView


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", default=None, help="act for this tenant (SAGAFLEET_TENANT)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: Any) -> None:
    """Add the saga subcommands."""
    define = sub.add_parser("register", help="register a saga definition (YAML or JSON file)")
    define.add_argument("file", help="the definition, as YAML (.yaml/.yml) or JSON")
    define.add_argument("--as", dest="actor", default="cli", help="who registers it")
    define.add_argument("--json", action="store_true", help="print one JSON document")
    define.set_defaults(handler=run_register)

    start = sub.add_parser("start", help="start a saga (idempotent by --key)")
    start.add_argument("definition", help="definition name, e.g. trip")
    start.add_argument("--input", required=True, help="the input as a JSON object")
    start.add_argument("--key", default=None, help="idempotency key: a retry returns the same saga")
    start.add_argument("--version", type=int, default=None, help="definition version (latest)")
    start.add_argument("--as", dest="actor", default="cli", help="who starts it")
    start.add_argument("--reason", default="", help="why (recorded on SagaStarted)")
    _common(start)
    start.set_defaults(handler=run_start)

    status = sub.add_parser("status", help="current state and steps of a saga")
    status.add_argument("saga_id")
    _common(status)
    status.set_defaults(handler=run_status)

    for name, helptext in (("approve", "approve a pending step"), ("deny", "deny a pending step")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("saga_id")
        p.add_argument("step")
        p.add_argument("--as", dest="actor", required=True, help="the approver's identity")
        p.add_argument("--compensation", action="store_true",
                       help="the request is for the step's compensation")
        if name == "approve":
            p.add_argument("--action-hash", default=None,
                           help="the action hash shown in the request (default: the pending one)")
        else:
            p.add_argument("--reason", required=True)
        _common(p)
        p.set_defaults(handler=run_approve if name == "approve" else run_deny)

    cancel = sub.add_parser("cancel", help="cancel a saga: compensate what can be compensated")
    cancel.add_argument("saga_id")
    cancel.add_argument("--as", dest="actor", required=True)
    cancel.add_argument("--reason", default="")
    _common(cancel)
    cancel.set_defaults(handler=run_cancel)


def _act(
    args: argparse.Namespace, settings: Settings, action: Callable[[SagaClient], SagaView]
) -> int:
    """Run one client action for the command's tenant and actor, and show the saga after it."""
    fleet = build_fleet(settings)
    try:
        fleet.register_builtin_definitions()
        client = fleet.client(tenant=args.tenant or settings.tenant,
                              actor=getattr(args, "actor", "cli"))
        view = action(client)
    finally:
        fleet.close()
    _show(view, args.json)
    return ExitCode.OK


def _kind(args: argparse.Namespace) -> StepKind:
    return StepKind.COMPENSATION if args.compensation else StepKind.FORWARD


def _show(view: SagaView, as_json: bool) -> None:
    def text(d: dict[str, Any]) -> str:
        lines = [f"saga {d['saga_id']}  {d['status']}  ({d['definition']} "
                 f"v{d['definition_version']}, tenant {d['tenant']})"]
        for s in d["steps"]:
            lines.append(f"  {s['step_id']:<18} {s['kind']:<13} {s['status']:<18} "
                         f"attempt {s['attempt']}")
        for p in d["pending_approvals"]:
            lines.append(f"  awaiting approval: {p['step_id']} ({p['kind']}) "
                         f"hash {p['action_hash'][:16]}… until {p['expires_at']}")
        if d["escalation"]:
            lines.append(f"  MANUAL INTERVENTION: {d['escalation']['reason']}")
        return "\n".join(lines)

    emit(view.model_dump(mode="json"), as_json=as_json, text=text)


def run_register(args: argparse.Namespace, settings: Settings) -> int:
    """Validate a definition file against the configured tool catalogue and store it."""
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except OSError as exc:
        emit_error(f"cannot read {path}: {exc.strerror}", as_json=args.json, kind="NotFound")
        return ExitCode.NOT_FOUND
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        emit_error(f"{path} is not valid YAML/JSON: {exc}", as_json=args.json,
                   kind="InvalidInput")
        return ExitCode.INVALID_INPUT
    if not isinstance(document, dict):
        emit_error(f"{path} must hold one definition (a mapping)", as_json=args.json,
                   kind="InvalidInput")
        return ExitCode.INVALID_INPUT
    fleet = build_fleet(settings)
    try:
        content_hash = fleet.client(actor=args.actor).register_definition(document)
    finally:
        fleet.close()
    result = {"name": document.get("name"), "version": document.get("version"),
              "hash": content_hash}
    emit(result, as_json=args.json,
         text=lambda d: f"registered {d['name']} v{d['version']} (hash {d['hash'][:16]}…)")
    return ExitCode.OK


def run_start(args: argparse.Namespace, settings: Settings) -> int:
    """Start a saga from a JSON input."""
    try:
        data = json.loads(args.input)
    except json.JSONDecodeError as exc:
        emit_error(f"--input is not JSON: {exc}", as_json=args.json, kind="InvalidInput")
        return ExitCode.INVALID_INPUT
    return _act(args, settings, lambda client: client.start(
        args.definition, data, key=args.key, version=args.version, reason=args.reason))


def run_status(args: argparse.Namespace, settings: Settings) -> int:
    """Show a saga."""
    return _act(args, settings, lambda client: client.status(args.saga_id))


def run_approve(args: argparse.Namespace, settings: Settings) -> int:
    """Approve a pending request."""
    return _act(args, settings, lambda client: client.approve(
        args.saga_id, args.step, kind=_kind(args), action_hash=args.action_hash))


def run_deny(args: argparse.Namespace, settings: Settings) -> int:
    """Deny a pending request."""
    return _act(args, settings, lambda client: client.deny(
        args.saga_id, args.step, reason=args.reason, kind=_kind(args)))


def run_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Request cancellation."""
    return _act(args, settings, lambda client: client.cancel(args.saga_id, reason=args.reason))
