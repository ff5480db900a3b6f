"""Binding a person's action to the saga version they were shown (``seen_version``).

A page (the console, ``sagafleet status``) shows a saga at some stream version; the person's
click must act on that state, not on whatever the saga became meanwhile. ``seen_version`` is
that version, and only that: it is not the append's precondition (``expected_version``, the
version the orchestrator loaded the saga at, which a lost race moves on). A
``SagaClient`` action judges each attempt of its write on the freshly loaded saga:

* the same click again records nothing and is no error (the action finds nothing to record:
  the grant, denial, cancel or operator action is already there);
* anything else on a saga that moved past the version seen -- something to record
  (:func:`check_seen`), or a refusal the move caused (:func:`moved_refusal`) -- is
  :class:`~saga_core.errors.SagaMoved`, and nothing is recorded;
* a refusal the principal's roles cause stays that refusal (the person may not act at all).

Judged on every attempt of the orchestrator's retry loop, so a race lost inside it is judged
on the fresh log too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from events.saga_log.port import LoadedSaga
from saga_core.engine.events import SagaEvent
from saga_core.errors import ErrorKind, SagaError, SagaMoved

__all__ = ["check_seen", "moved_refusal"]


def check_seen(
    seen_version: int | None, loaded: LoadedSaga, events: Sequence[SagaEvent] | None
) -> None:
    """SagaMoved when there are ``events`` to record on a saga that moved past
    ``seen_version`` (no check when None; nothing to record is never a move)."""
    if seen_version is not None and events is not None and loaded.version != seen_version:
        raise SagaMoved(loaded.saga_id, seen_version, loaded.version)


@contextmanager
def moved_refusal(seen_version: int | None, loaded: LoadedSaga) -> Iterator[None]:
    """Inside the block, a refusal of a saga that moved past ``seen_version`` is the move's:
    raised as SagaMoved (with the refusal as its reason); a refusal the principal's roles
    cause (FORBIDDEN), or any refusal of the saga as seen, stays as it is."""
    try:
        yield
    except SagaError as exc:
        if (seen_version is None or loaded.version == seen_version
                or exc.kind is ErrorKind.FORBIDDEN):
            raise
        raise SagaMoved(loaded.saga_id, seen_version, loaded.version, str(exc)) from exc
