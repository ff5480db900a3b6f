"""``sagafleet dev``: a local fleet in one command (:mod:`sagafleet.dev`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sagafleet.errors import UsageError
from sagafleet.settings import Settings

EXAMPLES = """examples:
  sagafleet dev                                   # the example trip on the sandbox providers
  sagafleet dev --tools mytools:tool_set --definitions order.yaml refund.yaml
  sagafleet dev --port 8081
"""


def register(sub: Any) -> None:
    """Add the ``dev`` subcommand."""
    dev = sub.add_parser(
        "dev", help="a local fleet in one command: servers, worker, sweeper, projector and "
        "console; Ctrl-C stops it all",
        description="Runs the embedded PostgreSQL and Redis (unless URLs are configured), "
        "migrates, registers the definitions, and starts a worker, the sweeper, the projector "
        "and the operator console; prints where each runs and a token to sign in with; Ctrl-C "
        "stops everything it started.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    dev.add_argument("--tools", metavar="MODULE:ATTR", default=None,
                     help="the tool set the worker runs (default: the example trip's tools "
                     "on the sandbox providers, and the trip registered)")
    dev.add_argument("--definitions", metavar="PATH", nargs="+", type=Path, default=[],
                     help="definition files (YAML or JSON) to register in the default tenant")
    dev.add_argument("--port", type=int, default=8080,
                     help="the console's port on 127.0.0.1 (default 8080)")
    dev.set_defaults(handler=run_dev)


def run_dev(args: argparse.Namespace, settings: Settings) -> int:
    """Run the local fleet until Ctrl-C."""
    if not 0 < args.port < 65_536:
        raise UsageError(f"sagafleet dev: --port must be 1..65535, not {args.port}")
    from sagafleet import dev

    dev.run(settings, dev.DevOptions(tools=args.tools, definitions=tuple(args.definitions),
                                     port=args.port))
    return 0  # not reached: run returns only by an error or Ctrl-C
