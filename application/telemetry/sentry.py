"""Sentry, only when configured: without a DSN sentry-sdk is never initialised at all.

sentry-sdk is the ``sentry`` extra (``pip install 'sagafleet[sentry]'``): a DSN set without
it is refused at start-up (:class:`~saga_core.errors.MissingExtra`), never ignored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from application.telemetry.logs import scrubbed_for_step
from saga_core.errors import MissingExtra


def init_sentry(dsn: str | None, *, component: str, traces_sample_rate: float = 1.0) -> bool:
    """Initialise sentry-sdk with the Celery integration when ``dsn`` is set, tracing
    ``traces_sample_rate`` of transactions (``SAGAFLEET_SENTRY_TRACES_SAMPLE_RATE``)."""
    if not 0.0 <= traces_sample_rate <= 1.0:
        raise ValueError(f"traces_sample_rate must be within 0..1, not {traces_sample_rate}")
    if not dsn:
        return False
    try:
        import sentry_sdk
        from sentry_sdk.integrations.celery import CeleryIntegration
    except ImportError:
        raise MissingExtra("SAGAFLEET_SENTRY_DSN (errors to Sentry)", "sentry") from None

    sentry_sdk.init(
        dsn=dsn,
        integrations=[CeleryIntegration(propagate_traces=True)],
        traces_sample_rate=traces_sample_rate,
        send_default_pii=False,  # saga inputs may hold personal data; never ship them
        # A frame's local variables may hold a revealed secret input (the executor's tool
        # arguments): an event from a tool that raised must never carry them to Sentry.
        include_local_variables=False,
        # Breadcrumbs and events are taken from log records before any handler's filter
        # runs: the secret values of the tool call running are replaced here too.
        before_breadcrumb=lambda crumb, hint: scrubbed_for_step(crumb),
        before_send=lambda event, hint: scrubbed_for_step(event),
        server_name=component,
    )
    return True


@contextlib.contextmanager
def step_scope(saga_id: str, step_id: str, kind: str, tool: str | None) -> Iterator[None]:
    """Tag errors and spans raised inside with the saga, step and tool (no-op without Sentry)."""
    try:
        import sentry_sdk
    except ImportError:  # the sentry extra is not installed: nothing to tag
        yield
        return
    if not sentry_sdk.is_initialized():
        yield
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("saga_id", saga_id)
        scope.set_tag("step_id", step_id)
        scope.set_tag("step_kind", kind)
        if tool:
            scope.set_tag("tool", tool)
        with sentry_sdk.start_span(op="saga.step", name=f"{step_id}:{kind}"):
            yield
