"""The sandbox's own settings: knobs of the simulated providers that the demo, ``sagafleet
dev`` and the tests run on, kept out of the fleet's :class:`~sagafleet.settings.Settings`
(a production fleet never reads them). Same variables as before they moved:
``SAGAFLEET_SANDBOX_DATABASE_URL`` and ``SAGAFLEET_TOOL_LATENCY_SECONDS``."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr

from sagafleet.settings import EnvironmentSettings


class SandboxSettings(EnvironmentSettings):
    """Where the sandbox providers keep their ledgers, and how slow they are."""

    HEADING: ClassVar[str] = ("the sandbox's configuration (the example providers of the demo, "
                              "sagafleet dev and the tests):")

    # The simulated providers are outside systems: their ledgers may live on a server of
    # their own, so that they outlive a failover of the fleet's database (scripts/failover.py).
    sandbox_database_url: SecretStr | None = Field(default=None, description=(
        "PostgreSQL DSN of the sandbox providers' ledgers, where they live apart from the "
        "event store (unset: the database)"),
    )
    # Added latency of every sandbox provider call (tests and benchmarks of slow tools); read
    # by sagafleet.sandbox:trip_tool_set.
    tool_latency_seconds: float = Field(default=0.0, ge=0, le=600, description=(
        "added latency of every sandbox provider call"))
