"""The subcommands; each module contributes a ``register(subparsers)`` function."""

from __future__ import annotations

from sagafleet.commands import (
    anchor,
    console_cmd,
    db,
    dead_letters,
    demo,
    fleet,
    mcp_cmd,
    operator,
    principals,
    projector,
    reports,
    sagas,
    secrets,
)
from sagafleet.errors import exit_code_for

REGISTRARS = [demo.register, db.register, fleet.register, sagas.register, operator.register,
              reports.register, anchor.register, dead_letters.register, mcp_cmd.register,
              projector.register, secrets.register, principals.register,
              console_cmd.register]

__all__ = ["REGISTRARS", "exit_code_for"]
