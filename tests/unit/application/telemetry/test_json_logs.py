"""Logs as JSON lines (``SAGAFLEET_LOG_FORMAT=json``): one object per record, naming the saga
and step being handled, the trace when one is current, extras and exceptions."""

from __future__ import annotations

import contextvars
import io
import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.sdk.trace import TracerProvider

from application.telemetry.logs import (
    JsonLinesFormatter,
    StepContextFilter,
    configure_logging,
    step_log_context,
)
from sagafleet.settings import ConfigurationError, Settings


@pytest.fixture
def lines() -> tuple[logging.Logger, io.StringIO]:
    """A logger writing JSON lines into a buffer through the filter and the formatter."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.addFilter(StepContextFilter())
    handler.setFormatter(JsonLinesFormatter())
    logger = logging.getLogger("test.json_logs")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, buffer


def records(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_a_record_inside_a_step_names_its_saga_and_step(lines) -> None:  # type: ignore[no-untyped-def]
    logger, buffer = lines
    # given a step being handled, when something is logged inside it and after it
    with step_log_context("saga-1", "hold_flight", "forward", 2):
        logger.warning("tool %s slow", "flights.hold", extra={"elapsed_s": 1.5})
    logger.info("idle")
    inside, after = records(buffer)
    # then the first line names the saga, step, kind and attempt, with the extra field
    assert inside["message"] == "tool flights.hold slow"
    assert inside["level"] == "WARNING" and inside["logger"] == "test.json_logs"
    assert (inside["saga_id"], inside["step_id"], inside["kind"], inside["attempt"]) == (
        "saga-1", "hold_flight", "forward", 2)
    assert inside["elapsed_s"] == 1.5
    assert str(inside["time"]).endswith("+00:00")
    # and the line after the step names none
    assert after["message"] == "idle" and "saga_id" not in after


def test_a_branch_thread_keeps_the_step_of_the_message_that_started_it(lines) -> None:  # type: ignore[no-untyped-def]
    logger, buffer = lines
    # given a step context, when a branch runs in a copy of it on another thread
    with step_log_context("saga-2", "hold_hotel"), ThreadPoolExecutor(1) as threads:
        threads.submit(contextvars.copy_context().run, logger.info, "branch").result()
    # then its record names the saga
    [branch] = records(buffer)
    assert branch["saga_id"] == "saga-2" and branch["step_id"] == "hold_hotel"


def test_an_exception_and_the_current_trace_are_in_the_line(lines) -> None:  # type: ignore[no-untyped-def]
    logger, buffer = lines
    tracer = TracerProvider().get_tracer("test")  # a provider of its own: no global set
    with tracer.start_as_current_span("saga.step") as span:
        try:
            raise ValueError("card declined")
        except ValueError:
            logger.exception("tool crashed")
    [line] = records(buffer)
    context = span.get_span_context()
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")
    assert "ValueError: card declined" in str(line["exception"])


def test_configure_logging_writes_json_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    kept = list(root.handlers), root.level
    try:
        configure_logging("INFO", "json")
        configure_logging("INFO", "json")  # a second call replaces, never doubles, the handler
        with step_log_context("saga-3", "send_itinerary"):
            logging.getLogger("workers.executor").info("sent")
        logging.getLogger("workers.executor").debug("not at INFO")
    finally:
        root.handlers[:] = kept[0]
        root.setLevel(kept[1])
    [line] = [json.loads(text) for text in capsys.readouterr().err.splitlines()]
    assert line["message"] == "sent" and line["saga_id"] == "saga-3"


def test_an_unknown_log_format_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="SAGAFLEET_LOG_FORMAT"):
        Settings.from_env({"SAGAFLEET_LOG_FORMAT": "xml"})
    with pytest.raises(ValueError, match="xml"):
        configure_logging("INFO", "xml")
    assert Settings.from_env({"SAGAFLEET_LOG_FORMAT": "json"}).log_format == "json"


def test_the_observability_settings_are_read_and_checked() -> None:
    settings = Settings.from_env({
        "SAGAFLEET_SENTRY_TRACES_SAMPLE_RATE": "0.25", "SAGAFLEET_OTEL": "1",
        "SAGAFLEET_WORKER_METRICS_PORT": "9465", "SAGAFLEET_METRICS_WINDOW_SECONDS": "300"})
    assert settings.sentry_traces_sample_rate == 0.25 and settings.otel
    assert settings.worker_metrics_port == 9465 and settings.metrics_window_seconds == 300
    with pytest.raises(ConfigurationError, match="SAGAFLEET_SENTRY_TRACES_SAMPLE_RATE"):
        Settings.from_env({"SAGAFLEET_SENTRY_TRACES_SAMPLE_RATE": "1.5"})
    with pytest.raises(ConfigurationError, match="SAGAFLEET_WORKER_METRICS_PORT"):
        Settings.from_env({"SAGAFLEET_WORKER_METRICS_PORT": "70000"})
    with pytest.raises(ConfigurationError, match="SAGAFLEET_METRICS_WINDOW_SECONDS"):
        Settings.from_env({"SAGAFLEET_METRICS_WINDOW_SECONDS": "0"})
