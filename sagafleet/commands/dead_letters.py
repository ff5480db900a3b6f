"""``sagafleet dead-letters [show|requeue|discard]``: messages that could never succeed.

An agent's command that no retry can help (malformed, a refused signature — its refusal
shown —, invalid input, unknown definition, idempotency conflict) is kept whole in
``fleet.dead_letters`` (:mod:`workers.dead_letters`), with the tenant proven to own it.
Every action, listing and showing included, is done as the principal of the command's token
(``--token-file`` or ``SAGAFLEET_TOKEN``: exit 11 without one), which needs a role allowing
dead letters (``operator``, ``fleet_operator``: exit 12 otherwise), and sees only the letters
of its own tenant — another tenant's letter is "not found" (exit 4), as one that never
existed; a letter whose tenant is unknown (unsigned, forged, malformed) only to the
``fleet_operator`` role. Listing and showing only read (no broker). ``requeue`` publishes
the original message again, to its task under its task id, once the cause is fixed — the
command is idempotent, so a requeue can never act twice — and ``discard`` closes a letter
saying why. Each resolves a letter once: doing it again does nothing and says so; the
other action on a resolved letter is a conflict (exit 5). An unknown id exits 4. The letter
records the name of the principal that requeued or discarded it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from application.principals.postgres import PostgresPrincipals
from sagafleet import runtime
from sagafleet.auth import add_token_option, cli_principal
from sagafleet.exit_codes import ExitCode
from sagafleet.fleetcli import command_fleet
from sagafleet.output import emit_report
from sagafleet.settings import Settings
from workers.dead_letters.store import DeadLetter, DeadLetters, Resolution
from workers.tasks import republish

EXAMPLES = """examples:
  export SAGAFLEET_TOKEN=sft_…        # an operator's (or the fleet_operator's) token
  sagafleet dead-letters --json
  sagafleet dead-letters show 12
  SAGAFLEET_TOKEN=sft_… sagafleet dead-letters requeue 12 --reason "definition trip-v2 registered"
  sagafleet dead-letters discard 13 --token-file ~/.sagafleet-token --reason "test message"

Each letter belongs to the tenant its message proves (the key that signed it, or the saga a
step message names) and answers only to that tenant's operators; a letter of unknown tenant
(tenant: null — unsigned, forged, malformed) only to the fleet_operator role.
"""


def _letter_json(letter: DeadLetter) -> dict[str, Any]:
    return {**asdict(letter), "args": letter.args, "kwargs": letter.kwargs,
            "message": None if letter.message is None else
            {"args": letter.args, "kwargs": letter.kwargs}}


def _headline(letter: DeadLetter) -> str:
    kind = letter.error_kind or "?"
    if letter.refusal:  # a refused signed command: why (unsigned, replayed, expired, ...)
        kind = f"{kind}: {letter.refusal}"
    owner = letter.tenant if letter.tenant is not None else "(unknown tenant)"
    return (f"#{letter.id}  {letter.status:<9} {owner}  {letter.task}  [{kind}]"
            f"  {letter.recorded_at:%Y-%m-%d %H:%M:%S}  {letter.reason}")


def _readable(envelope: str) -> str:
    """A signed command's envelope as sorted JSON, or as its text when it is not JSON."""
    try:
        return json.dumps(json.loads(envelope), sort_keys=True)
    except (ValueError, RecursionError):
        return envelope


@dataclass(frozen=True)
class DeadLettersReport:
    """The open dead letters, oldest first."""

    letters: Sequence[DeadLetter]

    def to_json(self) -> list[dict[str, Any]]:
        """Every open letter, with its whole message."""
        return [_letter_json(letter) for letter in self.letters]

    def to_text(self) -> str:
        """A line per letter."""
        if not self.letters:
            return "no open dead letters (of this tenant)"
        return "\n".join(_headline(letter) for letter in self.letters)


@dataclass(frozen=True)
class DeadLetterReport:
    """One dead letter, its whole message, and how it was resolved."""

    letter: DeadLetter

    def to_json(self) -> dict[str, Any]:
        """The letter with its whole message."""
        return _letter_json(self.letter)

    def to_text(self) -> str:
        """The headline, the task id, the message, and the resolution if any."""
        letter = self.letter
        lines = [_headline(letter), f"  task id: {letter.task_id or '-'}"]
        if letter.message is None:
            lines.append(f"  body (truncated, recorded before whole messages): {letter.body}")
        else:
            lines.append(f"  args: {json.dumps(letter.args)}")
            lines.append(f"  kwargs: {json.dumps(letter.kwargs, sort_keys=True)}")
            envelope = letter.kwargs.get("envelope")
            if isinstance(envelope, str):  # a signed command: what its envelope says
                lines.append(f"  envelope: {_readable(envelope)}")
        if letter.resolved_at is not None:
            lines.append(f"  {letter.status} by {letter.resolved_by} at {letter.resolved_at}:"
                         f" {letter.resolution}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ResolutionReport:
    """What a requeue or discard did: whether it changed anything, and the letter after it."""

    action: str
    resolution: Resolution

    def to_json(self) -> dict[str, Any]:
        """action, changed, and the letter."""
        return {"action": self.action, "changed": self.resolution.changed,
                "letter": _letter_json(self.resolution.letter)}

    def to_text(self) -> str:
        """One line: done, or already done (nothing was done again)."""
        letter = self.resolution.letter
        if self.resolution.changed:
            return f"dead letter {letter.id} {letter.status} ({letter.task})"
        return (f"dead letter {letter.id} was already {letter.status} by {letter.resolved_by}"
                f" at {letter.resolved_at}; nothing done")


def register(sub: Any) -> None:
    """Add ``dead-letters`` and its actions."""
    fmt = argparse.RawDescriptionHelpFormatter
    letters = sub.add_parser("dead-letters", help="commands that could never succeed: list, "
                             "show, requeue, discard", epilog=EXAMPLES, formatter_class=fmt)
    letters.add_argument("--json", action="store_true", help="print one JSON document")
    add_token_option(letters)
    letters.set_defaults(handler=run_list)
    actions = letters.add_subparsers(dest="action", metavar="ACTION")

    def action(name: str, helptext: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name, help=helptext, epilog=EXAMPLES, formatter_class=fmt)
        parser.add_argument("letter_id", type=int, metavar="ID")
        # SUPPRESS: an action's default must not undo a --json given before its name.
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                            help="print one JSON document")
        # SUPPRESS again: a --token-file given before the action's name must stay.
        parser.add_argument("--token-file", default=argparse.SUPPRESS, metavar="PATH",
                            help="read the API token from this file (else SAGAFLEET_TOKEN); "
                                 "the command acts as the token's principal, in its tenant")
        return parser

    show = action("show", "one dead letter and its whole message")
    show.set_defaults(handler=run_show)
    requeue = action("requeue", "publish the message again to its task (once)")
    requeue.add_argument("--reason", default="", help="why (recorded on the letter)")
    requeue.set_defaults(handler=run_requeue)
    discard = action("discard", "close the letter without running it (once)")
    discard.add_argument("--reason", required=True, help="why (recorded on the letter)")
    discard.set_defaults(handler=run_discard)


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    """List the open dead letters of the token's tenant (and, to the fleet role, those of
    unknown tenant)."""
    with runtime.read_side(settings) as ctx:
        viewer = cli_principal(args, settings, PostgresPrincipals(ctx.store))
        report = DeadLettersReport(DeadLetters(ctx.store).open_letters(viewer))
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def run_show(args: argparse.Namespace, settings: Settings) -> int:
    """Show one dead letter of the token's tenant (NotFound, exit 4, for any other)."""
    with runtime.read_side(settings) as ctx:
        viewer = cli_principal(args, settings, PostgresPrincipals(ctx.store))
        report = DeadLetterReport(DeadLetters(ctx.store).get(args.letter_id, viewer))
    emit_report(report, as_json=args.json)
    return ExitCode.OK


def run_requeue(args: argparse.Namespace, settings: Settings) -> int:
    """Publish a letter's message again and mark it requeued (a second time: nothing)."""
    fleet = command_fleet(settings)
    try:
        resolution = fleet.dead_letters.requeue(
            args.letter_id, cli_principal(args, settings, fleet.principals), args.reason,
            lambda letter: republish(fleet.celery, letter))
    finally:
        fleet.close()
    emit_report(ResolutionReport("requeue", resolution), as_json=args.json)
    return ExitCode.OK


def run_discard(args: argparse.Namespace, settings: Settings) -> int:
    """Mark a letter discarded, with who and why (a second time: nothing)."""
    fleet = command_fleet(settings)
    try:
        resolution = fleet.dead_letters.discard(
            args.letter_id, cli_principal(args, settings, fleet.principals), args.reason)
    finally:
        fleet.close()
    emit_report(ResolutionReport("discard", resolution), as_json=args.json)
    return ExitCode.OK
