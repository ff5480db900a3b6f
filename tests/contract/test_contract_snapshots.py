"""Contract: snapshots of saga state are a shortcut, never the truth, on both logs.

A load with snapshots gives the state a load of the whole history gives; a snapshot of
another schema or definition, one that does not decode or is not at a version the stream
has, one whose seal does not hold (its state edited, or taken at another event than the one
now at its version), is ignored (and replaced); every snapshot can be dropped.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from contract_support import Ports, note, start
from psycopg.types.json import Jsonb

from events.saga_log.snapshots import StoredSnapshot
from events.saga_log.streams import SagaNotFound, saga_stream
from saga_core.engine.state_codec import DEFAULT_SNAPSHOT_EVERY, SCHEMA, encode_state

MANY = DEFAULT_SNAPSHOT_EVERY + 8  # more events than a load folds before it writes a snapshot


def long_saga(ports: Ports, saga_id: str = "s1", events: int = MANY) -> None:
    """A started saga with ``events`` more events after its start."""
    start(ports, saga_id)
    for n in range(events):
        ports.log.append(saga_id, "t", [note(n + 1)], n + 1)


def kept(ports: Ports, saga_id: str = "s1", schema: str = SCHEMA) -> StoredSnapshot | None:
    """The saga's snapshot of ``schema`` as its log keeps it."""
    stream = saga_stream(saga_id)
    snapshots: Any = ports.log.snapshots  # type: ignore[attr-defined]
    found: StoredSnapshot | None = snapshots.read_from_snapshots([stream], schema)[stream].snapshot
    return found


def plant(ports: Ports, snapshot: StoredSnapshot, schema: str = SCHEMA) -> None:
    """Store ``snapshot`` as the saga's, through the log's own snapshot store."""
    ports.log.snapshots.save_snapshot(snapshot, schema)  # type: ignore[attr-defined]


def marked(ports: Ports, saga_id: str = "s1", **changes: Any) -> StoredSnapshot:
    """A well-formed snapshot of the saga at its version whose state says ``mallory`` where
    the log says ``ada``, taken (``changes`` made first) at the event at its version and
    sealed by the store as it keeps it, as someone who recomputes the seal would get it: a
    load that starts from it shows it."""
    loaded = ports.log.load_history(saga_id)
    assert loaded.started is not None
    state = dataclasses.replace(loaded.state, input={"traveller": "mallory"})
    fields = {"stream_id": saga_stream(saga_id), "version": loaded.version,
              "definition_hash": loaded.started.definition_hash, "state": encode_state(state),
              **changes}
    at = {r.stream_version: r.event_hash for r in loaded.records}
    return StoredSnapshot(**fields, event_hash=at.get(fields["version"], "0" * 64))


def test_a_long_load_writes_a_snapshot_and_the_next_load_folds_from_it(ports: Ports) -> None:
    long_saga(ports)
    # when a load folds more events than the policy allows past no snapshot
    first = ports.log.load("s1")
    # then a snapshot at its version is kept, and loads from it give the whole history's state
    snapshot = kept(ports)
    assert snapshot is not None and snapshot.version == first.version == MANY + 1
    ports.log.append("s1", "t", [note(MANY + 1)], MANY + 1)
    again, whole = ports.log.load("s1"), ports.log.load_history("s1")
    assert (again.state, again.version, again.started) == (whole.state, whole.version,
                                                             whole.started)
    assert encode_state(again.state) == encode_state(whole.state)


def test_a_short_load_writes_no_snapshot(ports: Ports) -> None:
    long_saga(ports, events=DEFAULT_SNAPSHOT_EVERY - 1)
    ports.log.load("s1")
    assert kept(ports) is None


def test_a_load_starts_from_a_snapshot_that_checks_out(ports: Ports) -> None:
    long_saga(ports)
    plant(ports, marked(ports))
    assert ports.log.load("s1").state.input == {"traveller": "mallory"}
    assert ports.log.load_history("s1").state.input == {"traveller": "ada"}


@pytest.mark.parametrize("changes", [
    {"definition_hash": "0" * 64},  # another definition
    {"state": {"nodes": "not a table", "state": 7}},  # does not decode
    {"version": MANY + 50},  # a version the stream does not have
    {"version": 3},  # a state that is not at its version
], ids=["other-definition", "corrupt", "beyond-the-stream", "not-at-its-version"])
def test_a_snapshot_that_does_not_check_out_is_ignored_and_replaced(
    ports: Ports, changes: dict[str, Any]
) -> None:
    long_saga(ports)
    plant(ports, marked(ports, **changes))
    loaded = ports.log.load("s1")
    assert loaded.state == ports.log.load_history("s1").state
    assert loaded.state.input == {"traveller": "ada"}
    replaced = kept(ports)
    assert replaced is not None and replaced.state == encode_state(loaded.state)


def edit_stored(ports: Ports, stream_id: str, *, state: Any = None, seal: str | None = None
                ) -> None:
    """Change what the log's snapshot store keeps for a stream behind its back: the state
    (its seal left as it was), or the seal."""
    if ports.kind == "postgres":  # someone with table access
        column, value = ("state", Jsonb(state)) if state is not None else ("state_hash", seal)
        with ports.store.connection() as conn:
            conn.execute(f"UPDATE eventstore.snapshots SET {column} = %s"  # noqa: S608
                         " WHERE stream_id = %s", (value, stream_id))
        return
    snapshots: Any = ports.log.snapshots  # type: ignore[attr-defined]
    kept = snapshots._kept[stream_id]  # noqa: SLF001 - the in-memory store has no other door
    snapshots._kept[stream_id] = (kept._replace(text=json.dumps(state)) if state is not None
                                  else kept._replace(sealed=seal))


def _input_edited(ports: Ports, honest: StoredSnapshot) -> None:
    fields = {**honest.state["state"], "input": {"traveller": "mallory"}}
    edit_stored(ports, honest.stream_id, state={**honest.state, "state": fields})


def _taken_elsewhere(ports: Ports, honest: StoredSnapshot) -> None:
    plant(ports, dataclasses.replace(honest, event_hash="0" * 64))


def _seal_edited(ports: Ports, honest: StoredSnapshot) -> None:
    edit_stored(ports, honest.stream_id, seal="0" * 64)


@pytest.mark.parametrize("break_it", [_input_edited, _taken_elsewhere, _seal_edited],
                         ids=["state-edited-after-sealing", "taken-at-another-event",
                              "seal-edited"])
def test_a_snapshot_whose_seal_does_not_hold_is_refused_and_replaced(
    ports: Ports, break_it: Any
) -> None:
    # given a long saga and an honest snapshot of it at its head, as a load keeps it
    long_saga(ports)
    history = ports.log.load_history("s1")
    assert history.started is not None
    honest = StoredSnapshot(saga_stream("s1"), history.version,
                            history.started.definition_hash, encode_state(history.state),
                            history.records[-1].event_hash)
    plant(ports, honest)
    assert kept(ports) == honest
    # when its stored state, its event or its seal is changed behind the log's back
    break_it(ports, honest)
    broken = kept(ports)
    assert broken is not None and broken != honest
    # then a load refuses it and folds the log
    loaded = ports.log.load("s1")
    assert loaded.state == history.state
    assert loaded.state.input == {"traveller": "ada"}
    # and keeps the honest snapshot of what it folded instead, sealed afresh
    assert kept(ports) == honest


def test_a_snapshot_of_another_schema_is_never_read(ports: Ports) -> None:
    long_saga(ports)
    plant(ports, marked(ports), schema="another fold")
    assert ports.log.load("s1").state.input == {"traveller": "ada"}
    assert kept(ports, schema="another fold") is None  # the load replaced it with its own


def test_load_many_folds_from_snapshots_like_single_loads(ports: Ports) -> None:
    long_saga(ports, "s1")
    long_saga(ports, "s2", events=3)
    ports.log.load("s1")
    many = ports.log.load_many(["s1", "s2", "nope", "s1"])
    for saga_id in ("s1", "s2"):
        loaded = many[saga_id]
        assert not isinstance(loaded, Exception)
        assert loaded.state == ports.log.load_history(saga_id).state
    assert isinstance(many["nope"], SagaNotFound)


def test_a_snapshot_does_not_show_a_saga_to_another_tenant(ports: Ports) -> None:
    long_saga(ports)
    ports.log.load("s1")
    assert kept(ports) is not None
    with pytest.raises(SagaNotFound):
        ports.log.load("s1", tenant="other")


def test_dropping_snapshots_loses_nothing_but_them(ports: Ports) -> None:
    long_saga(ports)
    before = ports.log.load("s1")
    assert ports.log.drop_snapshots() == 1
    assert kept(ports) is None
    assert ports.log.load("s1").state == before.state
