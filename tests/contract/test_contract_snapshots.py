"""Contract: snapshots of saga state are a shortcut, never the truth, on both logs.

A load with snapshots gives the state a load of the whole history gives; a snapshot of
another schema or definition, one that does not decode or is not at a version the stream
has, one whose seal does not hold (its state edited, or taken at another event than the one
now at its version), is ignored (and replaced); every snapshot can be dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from contract_support import Ports, note, start

from events.sagas import SagaNotFound, saga_stream
from events.snapshots import StoredSnapshot, sealed_snapshot
from saga_core.snapshots import DEFAULT_SNAPSHOT_EVERY, SCHEMA, encode_state

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
    the log says ``ada``, sealed (``changes`` made first) with the hash of the event at its
    version and of its state, as someone who recomputes the seal would: a load that starts
    from it shows it."""
    loaded = ports.log.load_history(saga_id)
    assert loaded.started is not None
    state = dataclasses.replace(loaded.state, input={"traveller": "mallory"})
    fields = {"stream_id": saga_stream(saga_id), "version": loaded.version,
              "definition_hash": loaded.started.definition_hash, "state": encode_state(state),
              **changes}
    at = {r.stream_version: r.event_hash for r in loaded.records}
    return sealed_snapshot(**fields, event_hash=at.get(fields["version"], "0" * 64))


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


def _edited_input(snapshot: StoredSnapshot) -> StoredSnapshot:
    """The snapshot with its stored state's input changed in place, its seal left as it was."""
    fields = {**snapshot.state["state"], "input": {"traveller": "mallory"}}
    return dataclasses.replace(snapshot, state={**snapshot.state, "state": fields})


@pytest.mark.parametrize("broken", [
    _edited_input,
    lambda s: dataclasses.replace(s, event_hash="0" * 64),
    lambda s: dataclasses.replace(s, state_hash="0" * 64),
], ids=["state-edited-after-sealing", "taken-at-another-event", "seal-edited"])
def test_a_snapshot_whose_seal_does_not_hold_is_refused_and_replaced(
    ports: Ports, broken: Any
) -> None:
    # given a long saga and an honest sealed snapshot of it at its head
    long_saga(ports)
    history = ports.log.load_history("s1")
    assert history.started is not None
    head = history.records[-1]
    honest = sealed_snapshot(saga_stream("s1"), history.version,
                             history.started.definition_hash, encode_state(history.state),
                             head.event_hash)
    # when its stored state, its event or its seal is changed behind the log's back
    plant(ports, broken(honest))
    # then a load refuses it and folds the log
    loaded = ports.log.load("s1")
    assert loaded.state == history.state
    assert loaded.state.input == {"traveller": "ada"}
    # and keeps the honest sealed snapshot of what it folded instead
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
