"""``sagafleet anchor``: take a checkpoint of the log now (the projector takes them every
SAGAFLEET_ANCHOR_INTERVAL_SECONDS; see events.integrity.anchors)."""

from __future__ import annotations

import argparse
from typing import Any

from events.integrity.anchors import take_checkpoint
from sagafleet import runtime
from sagafleet.anchor_key import anchor_key, anchor_witness
from sagafleet.commands.rendering import AnchorView
from sagafleet.exit_codes import ExitCode
from sagafleet.output import emit_report
from sagafleet.settings import Settings

EXAMPLES = """examples:
  sagafleet anchor
  sagafleet anchor --json
"""


def register(sub: Any) -> None:
    """Add the ``anchor`` subcommand."""
    anchor = sub.add_parser(
        "anchor", help="take a signed checkpoint of the log now (tamper evidence)",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    anchor.add_argument("--json", action="store_true", help="print one JSON document")
    anchor.set_defaults(handler=run_anchor)


def run_anchor(args: argparse.Namespace, settings: Settings) -> int:
    """Anchor everything final and not yet anchored; print the checkpoint (or that none was
    needed). Safe while the projector anchors too."""
    key = anchor_key(settings, create=True)
    with runtime.primary_side(settings) as ctx:  # a checkpoint is written
        taken = take_checkpoint(ctx.store, key, anchor_witness(settings))
    emit_report(AnchorView(taken), as_json=args.json)
    return ExitCode.OK
