"""What a long-running sagafleet process reports through: logs, Sentry, OpenTelemetry.

One call at start-up (before the first database connection, so psycopg's instrumentation
sees every connection), from the settings: the composition of ``application.telemetry.logs``,
``application.telemetry.sentry`` and ``application.telemetry.tracing``.
"""

from __future__ import annotations

from application.telemetry.logs import configure_logging
from application.telemetry.sentry import init_sentry
from application.telemetry.tracing import init_tracing
from sagafleet.settings import Settings, reveal


def start_telemetry(settings: Settings, component: str, level: str | int = "INFO") -> None:
    """Logging as ``SAGAFLEET_LOG_FORMAT`` says, Sentry when a DSN is set, OpenTelemetry
    when ``SAGAFLEET_OTEL`` is on; each does nothing when not configured."""
    configure_logging(level, settings.log_format)
    init_sentry(reveal(settings.sentry_dsn), component=component,
                traces_sample_rate=settings.sentry_traces_sample_rate)
    init_tracing(settings.otel, component)
