"""``python -m sagafleet.sandbox install``: create the sandbox's schemas in the configured
database (``SAGAFLEET_SANDBOX_DATABASE_URL``, else ``SAGAFLEET_DATABASE_URL``, else the
embedded one), for a fleet run with
``--tools sagafleet.sandbox:trip_tool_set`` (compose.yaml's ``sandbox`` service does this)."""

from __future__ import annotations

import sys

from sagafleet.exit_codes import ExitCode
from sagafleet.sandbox import configured_ledgers, install
from sagafleet.sandbox.settings import SandboxSettings
from sagafleet.settings import Settings


def main(argv: list[str]) -> int:
    """Install the sandbox's schemas; print the migrations newly applied."""
    if argv != ["install"]:
        print("usage: python -m sagafleet.sandbox install", file=sys.stderr)
        return ExitCode.USAGE
    for name in install(configured_ledgers(Settings.from_env(), SandboxSettings.from_env())):
        print(f"sandbox/{name}")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
