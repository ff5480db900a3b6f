"""Log records that name their saga and step, as text or as JSON lines.

While a worker handles a step, :func:`step_log_context` puts the saga id, step id, kind and
attempt in a context variable (carried into branch threads with the rest of the context);
:class:`StepContextFilter` copies them onto every record logged meanwhile, and
:class:`JsonLinesFormatter` writes one JSON object per record — with the trace and span ids
when an OpenTelemetry span is current — for ``SAGAFLEET_LOG_FORMAT=json``.

While a tool runs, the context also holds the saga's secret values (a
:class:`~application.secrets.guard.SecretWatch`): the filter replaces any of them in a record's
message and exception text before a handler writes it — a tool that logs its arguments, or
a library that logs a request, must not put the card token in the worker's log.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

from application.secrets.guard import SecretWatch
from application.telemetry.tracing import current_trace_ids

STEP_FIELDS: Final = ("saga_id", "step_id", "kind", "attempt")
"""What a record says about the step being handled, when one is."""
LOG_FORMATS: Final = ("text", "json")

_step: ContextVar[dict[str, Any] | None] = ContextVar("sagafleet_step", default=None)
_secrets: ContextVar[SecretWatch | None] = ContextVar("sagafleet_step_secrets", default=None)

# The attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName"}


@contextmanager
def step_log_context(saga_id: str, step_id: str | None = None, kind: str | None = None,
                     attempt: int | None = None, *,
                     secrets: SecretWatch | None = None) -> Iterator[None]:
    """Name this saga step on every record logged inside the block (this thread and the
    contexts copied from it); with ``secrets``, replace the saga's secret values in them."""
    values = {"saga_id": saga_id, "step_id": step_id, "kind": kind, "attempt": attempt}
    token = _step.set({k: v for k, v in values.items() if v is not None})
    watching = _secrets.set(secrets if secrets is not None else _secrets.get())
    try:
        yield
    finally:
        _secrets.reset(watching)
        _step.reset(token)


class StepContextFilter(logging.Filter):
    """Copies the current step's ids onto each record (``record.saga_id`` and so on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _step.get()
        if current:
            for name, value in current.items():
                if not hasattr(record, name):
                    setattr(record, name, value)
        watch = _secrets.get()
        if watch is not None:
            _scrub_record(record, watch)
        return True


def _scrub_record(record: logging.LogRecord, watch: SecretWatch) -> None:
    """Replace the watched secret values in a record's message, exception text (formatted
    here, once: a handler then writes the text it finds on the record) and ``extra=``
    fields (which the JSON lines carry)."""
    message = record.getMessage()
    clean = watch.text(message, "log")
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and not record.exc_text:
        record.exc_text = watch.text(_EXCEPTIONS.formatException(record.exc_info), "log")
    for name, value in list(vars(record).items()):
        if name not in _STANDARD and isinstance(value, str | dict | list):
            setattr(record, name, watch.document(value, "log"))


def scrubbed_for_step(value: Any) -> Any:
    """``value`` (a JSON-like report: an error tracker's event or breadcrumb) with the
    secret values of the tool call running in this context replaced (as it is otherwise)."""
    watch = _secrets.get()
    return value if watch is None else watch.document(value, "log")


_EXCEPTIONS = logging.Formatter()


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the
    step's ids, trace ids, any ``extra=`` fields, and the exception's text if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        current = _step.get() or {}
        for name in STEP_FIELDS:
            value = getattr(record, name, current.get(name))
            if value is not None:
                line[name] = value
        line.update(current_trace_ids())
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in line:
                line[name] = value
        if record.exc_info:
            # The text a filter formatted (and scrubbed) already, if one did.
            line["exception"] = record.exc_text or self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str | int, log_format: str = "text") -> None:
    """The root logger of a sagafleet process: ``level``, on stderr, as ``log_format``
    (``text`` or ``json``, :data:`LOG_FORMATS`). Replaces handlers a previous call added."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not "
                         f"{log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(StepContextFilter())
    handler.setFormatter(JsonLinesFormatter() if log_format == "json"
                         else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_sagafleet", False)]:
        root.removeHandler(old)
    handler._sagafleet = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
