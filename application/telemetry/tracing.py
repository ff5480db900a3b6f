"""OpenTelemetry spans of the fleet: optional, and nothing at all when not installed.

The fleet's code uses only the OpenTelemetry *API*, as a library should: a span is made
with the global tracer, which is a no-op until a process configures the SDK. Without the
``otel`` extra (``pip install 'sagafleet[otel]'``) the API is not even importable, and every
helper here is a plain function returning a shared do-nothing object: no import, no
allocation per call. With the extra installed but no tracer provider set up (``SAGAFLEET_OTEL``
unset, and the application configured none), the helpers do the same.

A process turns tracing on with :func:`init_tracing` when ``SAGAFLEET_OTEL=1``: it installs
the SDK's tracer provider (service name and resource from the standard ``OTEL_SERVICE_NAME``
/ ``OTEL_RESOURCE_ATTRIBUTES``, sampler from ``OTEL_TRACES_SAMPLER``), an exporter chosen by
the standard ``OTEL_TRACES_EXPORTER`` (``otlp``, the default, to ``OTEL_EXPORTER_OTLP_*``;
``console``; ``none``), and the Celery and psycopg instrumentations. Celery's carries the
trace context in each message's headers, so a saga's start, its messages, every step
attempt and compensation, and their SQL make one trace; :func:`trace_metadata` puts the
trace id into each event's metadata, so ``sagafleet audit`` shows it.

The shape of a trace: ``saga.start`` (a new trace per start, linked to the caller's span
if any) → ``publish sagafleet.step`` → ``run sagafleet.step`` → ``saga.step`` /
``saga.compensation`` / ``saga.reconcile`` (attributes ``sagafleet.saga_id``, ``.step_id``,
``.kind``, ``.tool``, ``.attempt``, ``.outcome``).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from saga_core.errors import ErrorKind, SagaError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

try:
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed: every span is _NO_SPAN
    _trace = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

TRACER_NAME = "sagafleet"
ATTRIBUTE_PREFIX = "sagafleet."


class Span(Protocol):
    """What the fleet's code does with a span: add attributes (outcome, once known)."""

    def set_attribute(self, key: str, value: Any) -> Any:
        """Set one attribute."""


class _NoSpan:
    """The span of a process without tracing: accepts everything, keeps nothing; it is its
    own context manager, so a span that is off costs one call and no allocation."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def tracing_available() -> bool:
    """Whether the OpenTelemetry API is importable (the ``otel`` extra is installed)."""
    return _trace is not None


def _tracing_configured() -> bool:
    """Whether some tracer provider was installed in this process (ours or the
    application's own): until then the API's proxy would only make non-recording spans,
    at a few microseconds each, so the helpers skip it."""
    return _trace is not None and not isinstance(_trace.get_tracer_provider(),
                                                 _trace.ProxyTracerProvider)


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {ATTRIBUTE_PREFIX + k: v for k, v in values.items() if v is not None}


def operation_span(name: str, **attributes: Any) -> AbstractContextManager[Span]:
    """A span around one step attempt, compensation or lookup (``sagafleet.*`` attributes);
    the caller sets ``outcome`` on it with :func:`set_outcome`."""
    if _trace is None or not _tracing_configured():
        return _NO_SPAN
    return _recorded_span(_trace, name, attributes)


@contextmanager
def _recorded_span(api: Any, name: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
    tracer = api.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(name, attributes=_attributes(attributes)) as span:
        yield span


def saga_start_span(
    *, trace_id: str | None = None, **attributes: Any
) -> AbstractContextManager[Span]:
    """The root of a saga's trace: a new trace per start, linked to the caller's span (an
    agent's request) when there is one, so each saga's work reads as one trace. With
    ``trace_id`` (the agent's own, from the start's lineage) the span joins that trace."""
    if _trace is None or not _tracing_configured():
        return _NO_SPAN
    return _start_span(_trace, attributes, trace_id)


@contextmanager
def _start_span(api: Any, attributes: Mapping[str, Any], trace_id: str | None) -> Iterator[Span]:
    caller = api.get_current_span().get_span_context()
    links = [api.Link(caller)] if caller.is_valid else []
    tracer = api.get_tracer(TRACER_NAME)
    parent = _root_context() if trace_id is None else _remote_parent(api, trace_id)
    with tracer.start_as_current_span("saga.start", context=parent, links=links,
                                      attributes=_attributes(attributes)) as span:
        yield span


def _remote_parent(api: Any, trace_id: str) -> Any:
    """A context whose current span is a remote one in trace ``trace_id``: the agent's
    trace, which the saga's spans then belong to."""
    span_id = 0
    while span_id == 0:
        span_id = random.getrandbits(64)
    remote = api.SpanContext(trace_id=int(trace_id, 16), span_id=span_id, is_remote=True,
                             trace_flags=api.TraceFlags(api.TraceFlags.SAMPLED))
    return api.set_span_in_context(api.NonRecordingSpan(remote), _root_context())


def _root_context() -> Any:
    """A context with no current span: what starts a new trace."""
    from opentelemetry.context import Context

    return Context()


def set_outcome(span: Span, outcome: str) -> None:
    """Record how the operation ended on its span."""
    span.set_attribute(ATTRIBUTE_PREFIX + "outcome", outcome)


def trace_metadata() -> dict[str, str]:
    """The current trace and span ids, for an event's metadata (empty without a trace;
    nothing is asked of the API until a tracer provider was set up)."""
    if not _tracing_configured():
        return {}
    return current_trace_ids()


def current_trace_ids() -> dict[str, str]:
    """``trace_id`` and ``span_id`` of the current span, hex as OpenTelemetry writes them
    (empty when no valid span is current, or OpenTelemetry is absent)."""
    if _trace is None:
        return {}
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x")}


class TracingUnavailable(SagaError):
    """``SAGAFLEET_OTEL=1`` but the ``otel`` extra (or the chosen exporter) is missing."""

    kind = ErrorKind.MISCONFIGURED


def init_tracing(enabled: bool, component: str, *,
                 exporter: SpanExporter | None = None) -> bool:
    """Configure the SDK, its exporter and the Celery and psycopg instrumentations in this
    process when ``enabled`` (``SAGAFLEET_OTEL``); return whether tracing is on.

    ``exporter``: where spans go instead of the one ``OTEL_TRACES_EXPORTER`` names (tests
    pass the SDK's in-memory exporter). The standard ``OTEL_SDK_DISABLED=true`` wins over
    ``enabled``. Call once per process, before the first database connection.
    """
    if not enabled or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if _trace is None:
        raise TracingUnavailable("SAGAFLEET_OTEL=1 needs the otel extra: "
                                 "pip install 'sagafleet[otel]'")
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create({SERVICE_NAME: f"sagafleet-{component}"}
                               if not os.environ.get("OTEL_SERVICE_NAME") else {})
    provider = TracerProvider(resource=resource)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        chosen = _configured_exporter()
        if chosen is not None:
            provider.add_span_processor(BatchSpanProcessor(chosen))
    _trace.set_tracer_provider(provider)
    _instrument_libraries()
    log.info("OpenTelemetry tracing on for %s", component)
    return True


def _configured_exporter() -> SpanExporter | None:
    """The exporter ``OTEL_TRACES_EXPORTER`` names: otlp (default), console or none."""
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip().lower()
    if name == "none":
        return None
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            raise TracingUnavailable(
                "OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http "
                "(in the otel extra), or set OTEL_TRACES_EXPORTER=console|none") from None
        exporter: SpanExporter = OTLPSpanExporter()
        return exporter
    raise TracingUnavailable(f"OTEL_TRACES_EXPORTER={name!r} is not supported here: "
                             "use otlp, console or none")


def _instrument_libraries() -> None:
    """Celery (spans for publish and run, context in message headers) and psycopg (a span
    per query); each instrumentor instruments a process once, so a second call is a no-op."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    celery = CeleryInstrumentor()  # type: ignore[no-untyped-call]
    if not celery.is_instrumented_by_opentelemetry:
        celery.instrument()
    psycopg = PsycopgInstrumentor()
    if not psycopg.is_instrumented_by_opentelemetry:
        # No SQL commenter: statements stay byte-identical (prepared statements, logs).
        psycopg.instrument(enable_commenter=False, skip_dep_check=True)
