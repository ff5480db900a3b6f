"""The subcommands; each module contributes a ``register(subparsers)`` function."""

from __future__ import annotations

from sagafleet.commands import db
from sagafleet.errors import exit_code_for

REGISTRARS = [db.register]

__all__ = ["REGISTRARS", "exit_code_for"]
