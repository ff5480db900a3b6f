"""``sagafleet register|start``: define sagas and start them (on a migrated database).

Looking at a saga is ``status`` (reports.py); acting on one is ``approve``, ``deny``,
``resolve`` and ``cancel`` (operator.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from sagafleet.commands.rendering import RegisteredDefinition, SagaReport
from sagafleet.errors import InvalidInput, NotFound
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import command_fleet
from sagafleet.output import emit_report
from sagafleet.settings import Settings


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
    start.add_argument("--input", required=True,
                       help="the input as a JSON object; @FILE reads it from a file, - from stdin")
    start.add_argument("--key", default=None, help="idempotency key: a retry returns the same saga")
    start.add_argument("--version", type=int, default=None, help="definition version (latest)")
    start.add_argument("--as", dest="actor", default="cli", help="who starts it")
    start.add_argument("--reason", default="", help="why (recorded on SagaStarted)")
    _common(start)
    start.set_defaults(handler=run_start)

    find = sub.add_parser("find", help="the saga this tenant started with an idempotency key")
    find.add_argument("key", help="the idempotency key given to start")
    _common(find)
    find.set_defaults(handler=run_find)


def run_register(args: argparse.Namespace, settings: Settings) -> int:
    """Validate a definition file against the configured tool catalogue and store it."""
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except OSError as exc:
        raise NotFound(f"cannot read {path}: {exc.strerror}") from None
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not valid YAML/JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidInput(f"{path} must hold one definition (a mapping)")
    fleet = command_fleet(settings)
    try:
        content_hash = fleet.client(actor=args.actor).register_definition(document)
    finally:
        fleet.close()
    report = RegisteredDefinition(document.get("name"), document.get("version"), content_hash)
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def run_start(args: argparse.Namespace, settings: Settings) -> int:
    """Start a saga from a JSON input."""
    data = _input_document(args.input)
    fleet = command_fleet(settings)
    try:
        fleet.register_builtin_definitions()
        client = fleet.client(tenant=args.tenant or settings.tenant, actor=args.actor)
        view = client.start(args.definition, data, key=args.key, version=args.version,
                            reason=args.reason)
    finally:
        fleet.close()
    emit_report(SagaReport(view), as_json=args.json)
    return ExitCode.OK



def run_find(args: argparse.Namespace, settings: Settings) -> int:
    """Show the saga started with an idempotency key (another tenant's is not found)."""
    fleet = command_fleet(settings)
    try:
        view = fleet.client(tenant=args.tenant or settings.tenant).find(args.key)
    finally:
        fleet.close()
    if view is None:
        raise NotFound(f"no saga was started with key {args.key!r} for this tenant")
    emit_report(SagaReport(view), as_json=args.json)
    return ExitCode.OK


def _input_document(value: str) -> Any:
    """``--input``'s JSON: the text itself, ``@FILE``'s content, or ``-`` for stdin."""
    source = "--input"
    if value == "-":
        text, source = sys.stdin.read(), "--input - (stdin)"
    elif value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise NotFound(f"--input {value}: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"--input {value}: {path} is not UTF-8 text") from None
        source = f"--input {value}"
    else:
        text = value
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{source} is not JSON: {exc}") from None
