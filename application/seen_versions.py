"""Binding a person's action to the saga version they were shown.

A page (the console) shows a saga at some stream version; the person's click must act on
that state, not on whatever the saga became meanwhile. :func:`bound_to_version` wraps what a
``SagaClient`` action records so that:

* the same click again records nothing and is no error (the wrapped build answers None: the
  grant, denial, cancel or operator action is already there);
* anything else on a saga that moved past the version shown -- something to record, or a
  refusal the move caused -- is :class:`~saga_core.errors.SagaMoved`, and nothing is recorded;
* a refusal the principal's roles cause stays that refusal (the person may not act at all).

Checked on every attempt of the orchestrator, so a race lost inside it is judged on the fresh
log too.
"""

from __future__ import annotations

from collections.abc import Sequence

from application.orchestrator import Build
from events.saga_log.port import LoadedSaga
from saga_core.engine.events import SagaEvent
from saga_core.errors import ErrorKind, SagaError, SagaMoved

__all__ = ["bound_to_version"]


def bound_to_version(build: Build, saga_id: str, expected_version: int | None) -> Build:
    """``build`` bound to ``expected_version`` (unbound when None)."""
    if expected_version is None:
        return build

    def bound(loaded: LoadedSaga) -> Sequence[SagaEvent] | None:
        try:
            events = build(loaded)
        except SagaError as exc:
            if loaded.version != expected_version and exc.kind is not ErrorKind.FORBIDDEN:
                raise SagaMoved(saga_id, expected_version, loaded.version, str(exc)) from exc
            raise
        if events is not None and loaded.version != expected_version:
            raise SagaMoved(saga_id, expected_version, loaded.version)
        return events

    return bound
