"""The per-stream hash chain: the database chains, Python verifies, edits are caught."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import GENESIS_HASH, EventStore, NewEvent, verify_chain

pytestmark = pytest.mark.integration

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(
                st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=8
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def test_an_intact_chain_verifies_and_links_every_event(store: EventStore) -> None:
    # given a stream written in three appends
    store.append("s", [NewEvent("A", {"n": 1})])
    store.append("s", [NewEvent("B", {"n": 2}), NewEvent("C", {"n": 3.25, "é": "ü"})])

    # when it is verified
    report = verify_chain(store, "s")

    # then every event checks out and the chain starts at the genesis hash
    events = store.read_stream("s")
    assert report.ok and report.events_checked == 3
    assert events[0].prev_hash == GENESIS_HASH
    assert report.head_hash == events[-1].event_hash == store.stream_head("s")[1]  # type: ignore[index]


def test_a_hand_edited_row_is_caught_and_named(store: EventStore) -> None:
    # given a stream of three events
    store.append("s", [NewEvent("Paid", {"amount": n}) for n in (10, 20, 30)])
    tampered = store.read_stream("s")[1]

    # when someone edits the second event's data with raw SQL
    with store.connection() as conn:
        conn.execute(
            "UPDATE eventstore.events SET data = '{\"amount\": 2000}'"
            " WHERE stream_id = 's' AND stream_version = 2"
        )

    # then verification names exactly that event as the first bad one
    report = verify_chain(store, "s")
    assert not report.ok and report.first_break is not None
    assert report.first_break.stream_version == 2
    assert report.first_break.event_id == str(tampered.event_id)
    assert "content" in report.first_break.reason


def test_a_deleted_last_event_is_caught_by_the_stream_head(store: EventStore) -> None:
    # given a stream of two events whose last event is deleted behind the store's back
    store.append("s", [NewEvent("A", {}), NewEvent("B", {})])
    with store.connection() as conn:
        conn.execute("DELETE FROM eventstore.events WHERE stream_version = 2")

    # then the chain of the remaining events is fine but the head disagrees
    report = verify_chain(store, "s")
    assert not report.ok and "head" in report.first_break.reason  # type: ignore[union-attr]


def test_verify_chain_accepts_already_read_events(store: EventStore) -> None:
    store.append("s", [NewEvent("A", {}), NewEvent("B", {})])
    events = store.read_stream("s")
    assert verify_chain(events, "s").ok
    assert not verify_chain([events[1]], "s").ok  # a missing first event is a break


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    data=st.dictionaries(
        st.text(max_size=6).filter(lambda k: "\x00" not in k), json_values, max_size=5
    )
)
def test_hashes_survive_the_jsonb_round_trip(store: EventStore, data: dict[str, object]) -> None:
    # given arbitrary JSON data (floats, big ints, unicode, nesting)
    # when it is appended and read back through jsonb
    result = store.append("prop", [NewEvent("P", data)])

    # then the hash the database chained equals the one Python recomputes from the row
    assert verify_chain(store, "prop").ok
    assert store.read_stream("prop")[-1].event_hash == result.events[0].event_hash


@pytest.mark.parametrize(
    "value",
    [1e16, 1e308, -0.0, 5e-324, 1.5e-7, 0.1, 2**70, -(2**63), 1.0, 123456789.125, "é\u2028😀"],
)
def test_awkward_json_values_keep_their_hash(store: EventStore, value: object) -> None:
    # given a value jsonb is known to print differently than Python does
    # when it is stored and read back
    store.append("v", [NewEvent("V", {"x": value, "nested": [value, {"y": value}]})])
    # then the recomputed hash still matches the chained one
    assert verify_chain(store, "v").ok


@pytest.mark.parametrize(
    ("stream_id", "event_type"),
    [
        ('quo"te\\slash', 'Ty"pe\\'),
        ("tab\tnew\nline\x01", "ctl\x1f\x7f"),
        ("ünï 😀 \u2028", "Tÿpe"),
    ],
)
def test_awkward_stream_ids_and_types_hash_alike_in_sql_and_python(
    store: EventStore, stream_id: str, event_type: str
) -> None:
    # given a stream id and type that need JSON escaping
    # when events go through both append paths (any version: the function; then at the
    # version this store remembers: the chained insert)
    store.append(stream_id, [NewEvent(event_type, {"k": '"\\'}), NewEvent(event_type, {})])
    store.append(stream_id, [NewEvent(event_type, {"n": 1})], expected_version=2)
    # then Python recomputes every hash the database chained
    report = verify_chain(store, stream_id)
    assert report.ok and report.events_checked == 3


@pytest.mark.parametrize(
    ("stream_id", "event_type"),
    [("plain", "T"), ('quo"te\\slash', 'Ty"pe\\'), ("ünï 😀 \u2028", "ctl\x1f\x7f")],
)
def test_appends_whose_chain_is_computed_client_side_verify_like_the_rest(
    store: EventStore, stream_id: str, event_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import events.eventstore.appending as appending

    computed: list[int] = []
    real = appending._chained_insert

    def spy(*args: object, **kwargs: object) -> object:
        rows = real(*args, **kwargs)  # type: ignore[arg-type]
        computed.append(len(rows))
        return rows

    monkeypatch.setattr(appending, "_chained_insert", spy)
    # given a stream this store created (so it knows the hash of version 1)
    store.append(stream_id, [NewEvent(event_type, {"n": 0})], expected_version=0)
    # when batches and single events are appended at the versions it knows
    store.append(stream_id, [NewEvent(event_type, {"k": '"\\', "f": 0.1}, metadata={
        "tenant": 'acme"\\', "actor": "é"}), NewEvent(event_type, {})], expected_version=1)
    store.append(stream_id, [NewEvent(event_type, {"n": 3}), NewEvent(event_type, {})],
                 expected_version=3)
    store.append(stream_id, [NewEvent(event_type, {"n": 5})], expected_version=5)
    # then every append took the computed path (the creation from the genesis hash, the
    # rest from the remembered tips), and every hash verifies
    assert computed == [1, 2, 2, 1]
    report = verify_chain(store, stream_id)
    assert report.ok and report.events_checked == 6


def test_a_wrong_or_stale_remembered_hash_only_costs_the_server_side_path(
    store: EventStore,
) -> None:
    # given a stream at version 2
    store.append("w", [NewEvent("A", {}), NewEvent("B", {})], expected_version=0)
    # when the store's remembered hash for version 2 is wrong (it cannot be, but say so)
    store._hashes["w"] = (2, "f" * 64)
    # then an append expecting version 2 is still chained right, by the server
    store.append("w", [NewEvent("C", {}), NewEvent("C2", {})], expected_version=2)
    assert verify_chain(store, "w").ok
    # and a stale expectation is still the usual conflict, naming the actual version
    from events import ConcurrencyError

    with pytest.raises(ConcurrencyError, match="actual version 4"):
        store.append("w", [NewEvent("D", {}), NewEvent("E", {})], expected_version=2)
    assert store.stream_version("w") == 4 and verify_chain(store, "w").ok


def test_a_chain_computed_by_one_store_continues_on_another_stores_server_path(
    store: EventStore, fresh_database: str
) -> None:
    from events import ConcurrencyError

    # given a stream created and continued by this store (its chain computed here)
    created = store.append("c", [NewEvent("A", {"n": 1})], expected_version=0)
    created = store.append("c", [NewEvent("B", {})], expected_version=1)
    first = store.read_stream("c")[0]
    assert first.prev_hash == GENESIS_HASH
    assert created.events[0].prev_hash == first.event_hash
    # when another store, which remembers nothing, appends a single event and a batch (the
    # append function), and a creation is retried
    with EventStore.connect(fresh_database, pool_size=2) as other:
        other.append("c", [NewEvent("C", {})], expected_version=2)
        other.append("c", [NewEvent("D", {}), NewEvent("E", {})], expected_version=3)
        with pytest.raises(ConcurrencyError, match="actual version 5"):
            other.append("c", [NewEvent("X", {}), NewEvent("Y", {})], expected_version=0)
        # then the chain is one, and the head is where the events are
        assert other.stream_head("c") == (5, other.read_stream("c")[-1].event_hash)
    assert verify_chain(store, "c").ok and verify_chain(store, "c").events_checked == 5
