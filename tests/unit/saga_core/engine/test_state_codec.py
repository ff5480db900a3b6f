"""Snapshots of saga state: a decoded snapshot folds on to the same state as the whole log."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_properties import Driver, definitions, play

import saga_core.engine.state_codec as snapshots
from saga_core import SagaDefinition, SagaState, evolve
from saga_core.engine.state_codec import SnapshotUnreadable, decode_state, encode_state


def through_json(state: SagaState) -> object:
    """What a store keeps of a state: its encoding, as JSON text read back."""
    return json.loads(json.dumps(encode_state(state)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), data=st.data())
def test_a_snapshot_at_every_cut_point_folds_on_to_the_state_of_the_whole_log(
    definition: SagaDefinition, data: st.DataObject
) -> None:
    # Given a random saga's history and the state after each of its prefixes
    events = play(Driver(definition, data)).events
    prefixes = [SagaState.initial(definition)]
    for event in events:
        prefixes.append(evolve(prefixes[-1], event))
    whole = prefixes[-1]
    for cut, prefix in enumerate(prefixes):
        # When the prefix's state goes through a snapshot and the rest is folded onto it
        state = decode_state(through_json(prefix), definition)
        for event in events[cut:]:
            state = evolve(state, event)
        # Then it is the state of the whole log, down to the runs kept at each first claim
        assert state == whole
        assert encode_state(state) == encode_state(whole)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), data=st.data())
def test_a_snapshot_decodes_into_the_same_sharing_of_runs(
    definition: SagaDefinition, data: st.DataObject
) -> None:
    # Given a state whose claimed runs keep the forward runs they resolved from
    state = play(Driver(definition, data)).state
    # When it goes through a snapshot
    decoded = decode_state(through_json(state), definition)
    # Then a run that kept the current forward runs keeps the decoded ones, not a copy
    for step_id, run in state.forward.items():
        if run.forward_at_first_claim is state.forward:
            assert decoded.forward[step_id].forward_at_first_claim is decoded.forward


CORRUPT = [
    None, [], {}, {"nodes": [], "state": {}}, {"nodes": [{"runs": {"a": 7}}], "state": {}},
    {"nodes": [{"runs": [["a", 7]]}], "state": {}},
    {"nodes": "x", "state": {"phase": "forward"}},
]


@settings(max_examples=5, deadline=None)
@given(definition=definitions(), document=st.sampled_from(CORRUPT))
def test_a_document_that_is_not_a_snapshot_is_unreadable_not_a_crash(
    definition: SagaDefinition, document: object
) -> None:
    with pytest.raises(SnapshotUnreadable):
        decode_state(document, definition)


@settings(max_examples=5, deadline=None)
@given(definition=definitions())
def test_a_field_of_the_wrong_type_is_unreadable(definition: SagaDefinition) -> None:
    document = encode_state(SagaState.initial(definition))
    document["state"]["version"] = "7"
    with pytest.raises(SnapshotUnreadable, match="not a int"):
        decode_state(document, definition)


def test_the_schema_fingerprint_changes_with_the_meaning_of_evolve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = snapshots._fingerprint()
    monkeypatch.setattr(snapshots, "FOLD_VERSION", snapshots.FOLD_VERSION + 1)
    assert snapshots._fingerprint() != before
    assert before == snapshots.SCHEMA
