"""What a long-running sagafleet process reports through: logs, Sentry, OpenTelemetry.

One call at start-up (before the first database connection, so psycopg's instrumentation
sees every connection), from the settings: the composition of ``workers.logs``,
``workers.observability`` and ``workers.tracing``.
"""

from __future__ import annotations

from sagafleet.settings import Settings
from workers.logs import configure_logging
from workers.observability import init_sentry
from workers.tracing import init_tracing


def start_telemetry(settings: Settings, component: str, level: str | int = "INFO") -> None:
    """Logging as ``SAGAFLEET_LOG_FORMAT`` says, Sentry when a DSN is set, OpenTelemetry
    when ``SAGAFLEET_OTEL`` is on; each does nothing when not configured."""
    configure_logging(level, settings.log_format)
    init_sentry(settings.sentry_dsn, component=component,
                traces_sample_rate=settings.sentry_traces_sample_rate)
    init_tracing(settings.otel, component)
