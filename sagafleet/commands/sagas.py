"""``sagafleet register|start|wait``: define sagas, start them, wait for one (on a
migrated database).

Looking at a saga is ``status`` or ``find`` (reports.py); acting on one is ``approve``, ``deny``,
``resolve`` and ``cancel`` (operator.py). ``register`` and ``start`` act as the principal
of the command's API token (``--token-file`` or ``SAGAFLEET_TOKEN``), in its tenant:
registering needs the ``admin`` role, starting the ``agent`` role.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from application.client import MAX_WAIT_SECONDS, Waited
from application.telemetry.tracing import init_tracing
from saga_core.agents.lineage import FIELDS as LINEAGE_FIELDS
from saga_core.agents.lineage import Lineage, parse_lineage
from saga_core.definitions.definition import check_definition_document
from saga_core.definitions.documents import Syntax, load_document
from saga_core.limits import DEFINITION_BYTES, INPUT_TEXT_BYTES
from sagafleet.auth import add_token_option, cli_principal
from sagafleet.commands.dry_run_report import DryRunReport
from sagafleet.commands.rendering import RegisteredDefinition, SagaReport
from sagafleet.errors import InvalidInput, NotFound, UsageError
from sagafleet.example_sagas.registration import register_trip
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import command_fleet, watching_fleet
from sagafleet.json_arguments import json_argument, read_at_most
from sagafleet.output import emit_report
from sagafleet.settings import Settings


def _common(parser: argparse.ArgumentParser) -> None:
    add_token_option(parser)  # reads as the token's principal, in its tenant
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: Any) -> None:
    """Add the saga subcommands."""
    define = sub.add_parser("register", help="register a saga definition (YAML or JSON file)")
    define.add_argument("file", help="the definition, as YAML (.yaml/.yml) or JSON")
    add_token_option(define)
    define.add_argument("--json", action="store_true", help="print one JSON document")
    define.set_defaults(handler=run_register)

    start = sub.add_parser("start", help="start a saga (idempotent by --key)")
    start.add_argument("definition", help="definition name, e.g. trip")
    start.add_argument("--input", required=True,
                       help="the input as a JSON object; @FILE reads it from a file, - from stdin")
    start.add_argument("--key", default=None, help="idempotency key: a retry returns the same saga")
    start.add_argument("--version", type=int, default=None, help="definition version (latest)")
    start.add_argument("--reason", default="", help="why (recorded on SagaStarted)")
    _lineage_option(start)
    start.add_argument("--dry-run", action="store_true",
                       help="show what the start would do (graph, arguments, keys, gates, "
                       "compensations, budget), writing nothing and calling no tool")
    add_token_option(start)
    start.add_argument("--json", action="store_true", help="print one JSON document")
    start.set_defaults(handler=run_start)

    plan = sub.add_parser(
        "plan", help="submit an agent plan (JSON file) and, with --input, start it")
    plan.add_argument("file", help="the plan: {\"goal\": ..., \"actions\": [...]} as JSON")
    plan.add_argument("--input", default=None,
                      help="start the plan's saga with this input (JSON, @FILE or -)")
    plan.add_argument("--name", default=None,
                      help="definition name (default: agent-plan-<16 hex of the plan>)")
    plan.add_argument("--version", type=int, default=1, help="definition version (1)")
    plan.add_argument("--key", default=None, help="idempotency key of the start")
    plan.add_argument("--reason", default="", help="why (recorded on SagaStarted)")
    _lineage_option(plan)
    plan.add_argument("--dry-run", action="store_true",
                      help="validate and show what the plan's start would do, writing nothing")
    add_token_option(plan)
    plan.add_argument("--json", action="store_true", help="print one JSON document")
    plan.set_defaults(handler=run_plan)

    wait = sub.add_parser(
        "wait", help="wait until a saga is finished or waits for a person (exit 10: timed out)")
    wait.add_argument("saga_id")
    wait.add_argument("--timeout", type=float, default=60.0, metavar="S",
                      help=f"longest to wait, in seconds (0 to {MAX_WAIT_SECONDS:g}; 60)")
    _common(wait)
    wait.set_defaults(handler=run_wait)


def _lineage_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lineage", default=None, metavar="JSON",
        help="who and what asks, recorded on SagaStarted and shown by audit: a JSON object "
        f"of {', '.join(LINEAGE_FIELDS)} (all optional); @FILE reads it from a file, - from "
        "stdin")


def read_definition_file(path: Path) -> dict[str, Any]:
    """The definition document a YAML (``.yaml``/``.yml``) or JSON file holds, checked for
    shape: ``NotFound`` if it cannot be read, ``InvalidInput`` naming the file otherwise."""
    try:
        with path.open("rb") as file:
            text = read_at_most(file, DEFINITION_BYTES, f"definition file {path}")
    except OSError as exc:
        raise NotFound(f"cannot read {path}: {exc.strerror}") from None
    syntax: Syntax = "yaml" if path.suffix in (".yaml", ".yml") else "json"
    document = load_document(text, f"definition file {path}", DEFINITION_BYTES, syntax)
    if not isinstance(document, dict):
        raise InvalidInput(f"{path} must hold one definition (a mapping)")
    check_definition_document(document, f"definition file {path}")
    return document


def run_register(args: argparse.Namespace, settings: Settings) -> int:
    """Validate a definition file against the configured tool catalogue and store it."""
    document = read_definition_file(Path(args.file))
    fleet = command_fleet(settings)
    try:
        principal = cli_principal(args, settings, fleet.principals)
        content_hash = fleet.client_for(principal).register_definition(document)
    finally:
        fleet.close()
    report = RegisteredDefinition(document.get("name"), document.get("version"), content_hash)
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def run_start(args: argparse.Namespace, settings: Settings) -> int:
    """Start a saga from a JSON input."""
    data = _input_document(args.input)
    lineage = _lineage_document(args.lineage, args.input)
    init_tracing(settings.otel, "cli")  # the saga's trace starts here
    fleet = command_fleet(settings)
    try:
        client = fleet.client_for(cli_principal(args, settings, fleet.principals))
        if args.dry_run:  # reads only: no built-in registration, no event, no message
            planned = client.dry_run(args.definition, data, key=args.key,
                                     version=args.version, reason=args.reason)
            emit_report(DryRunReport(planned), as_json=args.json)
            return ExitCode.OK
        # The example trip, only where this fleet can run its tools (the sandbox's; a
        # command line with no tool set checks against the example catalogue).
        register_trip(fleet)
        view = client.start(args.definition, data, key=args.key, version=args.version,
                            reason=args.reason, lineage=lineage)
    finally:
        fleet.close()
    emit_report(SagaReport(view), as_json=args.json)
    return ExitCode.OK


def run_plan(args: argparse.Namespace, settings: Settings) -> int:
    """Submit an agent plan (and start it with ``--input``), or dry-run both."""
    plan = _input_document("@" + args.file)
    data = None if args.input is None else _input_document(args.input)
    if args.lineage is not None and data is None:
        raise UsageError("--lineage is recorded on the plan's start: give it with --input")
    lineage = _lineage_document(args.lineage, args.input)
    fleet = command_fleet(settings)
    try:
        client = fleet.client_for(cli_principal(args, settings, fleet.principals))
        if args.dry_run:
            planned = client.dry_run_plan(plan, data if data is not None else {},
                                          name=args.name, version=args.version,
                                          key=args.key, reason=args.reason)
            emit_report(DryRunReport(planned), as_json=args.json)
            return ExitCode.OK
        definition = client.submit_plan(plan, name=args.name, version=args.version)
        if data is None:
            emit_report(RegisteredDefinition(definition.name, definition.version,
                                             definition.content_hash()), as_json=args.json)
            return ExitCode.OK
        view = client.start(definition.name, data, key=args.key, version=definition.version,
                            reason=args.reason, lineage=lineage)
    finally:
        fleet.close()
    emit_report(SagaReport(view), as_json=args.json)
    return ExitCode.OK


@dataclass(frozen=True)
class WaitReport:
    """What ``wait`` saw: whether the saga settled, and the saga as it then stood."""

    waited: Waited
    timeout: float

    def to_json(self) -> dict[str, Any]:
        """``settled``, ``timed_out`` and the saga view."""
        return {"settled": self.waited.settled, "timed_out": not self.waited.settled,
                "saga": self.waited.saga.model_dump(mode="json")}

    def to_text(self) -> str:
        """A line saying how the wait ended, then the saga as ``status`` shows it."""
        saga = self.waited.saga
        if not self.waited.settled:
            head = f"timed out after {self.timeout:g} s: the saga is still {saga.status}"
        elif saga.terminal:
            head = f"settled: the saga finished {saga.status}"
        else:
            head = "settled: the saga waits for a person"
        return head + "\n" + SagaReport(saga).to_text()


def run_wait(args: argparse.Namespace, settings: Settings) -> int:
    """Wait for a saga to finish or to wait for a person; exit TIMED_OUT if it did neither."""
    fleet = watching_fleet(settings)
    try:
        client = fleet.client_for(cli_principal(args, settings, fleet.principals))
        waited = client.wait(args.saga_id, args.timeout)
    finally:
        fleet.close()
    emit_report(WaitReport(waited, args.timeout), as_json=args.json)
    return ExitCode.OK if waited.settled else ExitCode.TIMED_OUT


def _input_document(value: str) -> Any:
    """``--input``'s JSON: the text itself, ``@FILE``'s content, or ``-`` for stdin."""
    # Size and nesting are checked on the text; the parsed value's own size (against
    # saga_input_bytes) is the client's check, the same for every entry.
    return json_argument(value, "--input", INPUT_TEXT_BYTES)


def _lineage_document(value: str | None, input_value: str | None) -> Lineage | None:
    """``--lineage``'s JSON (as ``--input``'s), checked: InvalidLineage names each bad field."""
    if value is None:
        return None
    if value == "-" and input_value == "-":
        raise UsageError("--input and --lineage cannot both read standard input (-)")
    return parse_lineage(json_argument(value, "--lineage", INPUT_TEXT_BYTES), "--lineage")
