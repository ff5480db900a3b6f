"""What a process tells about itself: logs that name their saga, Prometheus instruments,
OpenTelemetry spans and Sentry.

* :mod:`application.telemetry.logs` — Log records that name their saga and step, as text or as
  JSON lines.
* :mod:`application.telemetry.metrics` — What one worker process did, as Prometheus instruments
  (``prometheus_client``).
* :mod:`application.telemetry.sentry` — Sentry, only when configured: without a DSN sentry-sdk
  is never initialised at all.
* :mod:`application.telemetry.tracing` — OpenTelemetry spans of the fleet: optional, and nothing
  at all when not installed.
"""
