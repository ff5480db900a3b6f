"""While a tool runs, a worker's log lines never carry the saga's secret values: not in the
message, its arguments, an ``extra=`` field or an exception's text (application.telemetry.logs)."""

from __future__ import annotations

import io
import json
import logging

from application.secrets.guard import SecretGuard
from application.secrets.memory import MemorySecrets
from application.telemetry.logs import JsonLinesFormatter, StepContextFilter, step_log_context
from application.telemetry.metrics import WorkerMetrics
from saga_core.secret_scrub import SCRUBBED, SecretNeedles

TOKEN = "tok_live_LOGLEAK_4711"


def _lines(log_format: logging.Formatter) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(StepContextFilter())
    handler.setFormatter(log_format)
    logger = logging.getLogger(f"test.log_secrets.{id(out)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger, out


def test_a_tool_logging_its_arguments_writes_the_marker_and_it_is_counted() -> None:
    guard = SecretGuard(MemorySecrets(), WorkerMetrics())
    logger, out = _lines(JsonLinesFormatter())
    # when a tool logs the token as an argument, in an extra field and in an exception
    with step_log_context("saga-1", "pay", "forward", 1,
                          secrets=guard.watch(SecretNeedles.of([TOKEN]))):
        logger.info("calling provider with %s", {"card_token": TOKEN})
        logger.info("request", extra={"payload": {"card_token": TOKEN}})
        try:
            raise ValueError(f"declined card {TOKEN}")
        except ValueError:
            logger.exception("the provider refused")
    # and after the call, outside the tool's context, it logs again
    logger.info("after the call: %s", TOKEN)
    # then every line inside the call holds the marker instead, and each was counted
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    inside = json.dumps(lines[:3])
    assert TOKEN not in inside and SCRUBBED in inside
    assert lines[0]["saga_id"] == "saga-1"
    assert guard.scrubbed("log") == 3
    # (outside a tool call nothing is watched: the worker never logs a value there)
    assert TOKEN in lines[3]["message"]
