"""Checking a stored snapshot against the log: it must be its saga's fold up to its version.

A load trusts a snapshot whose seal holds (:func:`events.saga_log.snapshots.snapshot_problem`), and
someone who edits a state and recomputes its hash gets past that. This check does not stop
at the seal: it folds the stream afresh up to the snapshot's version and compares the states,
so such an edit is named too. ``verify`` runs it on every snapshot, ``audit`` on its saga's.
"""

from __future__ import annotations

from collections.abc import Sequence

from events.eventstore.model import RecordedEvent
from events.saga_log.snapshots import StoredSnapshot, snapshot_problem
from events.saga_log.streams import SagaCodec, saga_id_of
from saga_core.engine.state_codec import decode_state
from saga_core.errors import SagaError


def snapshot_finding(
    codec: SagaCodec, snapshot: StoredSnapshot, records: Sequence[RecordedEvent]
) -> str | None:
    """Why ``snapshot`` is not the fold of its stream (``records``, the whole stream in
    version order) up to its version; None when it is."""
    at_version = next((r for r in records if r.stream_version == snapshot.version), None)
    problem = snapshot_problem(snapshot, at_version)
    if problem is not None:
        return problem
    saga_id = saga_id_of(snapshot.stream_id)
    if saga_id is None:
        return "it is the snapshot of a stream that holds no saga"
    try:
        history = codec.fold(saga_id, [r for r in records if r.stream_version <= snapshot.version])
        if history.started is None or snapshot.definition_hash != history.started.definition_hash:
            return "it names another definition than its saga's start"
        state = decode_state(snapshot.state, codec.definitions.by_hash(snapshot.definition_hash))
    except SagaError as exc:
        return f"it cannot be compared with the log: {exc}"
    if state != history.state:
        return (f"its state is not the fold of the log up to version {snapshot.version}"
                " (edited, with its hash recomputed)")
    return None
