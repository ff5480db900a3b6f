"""Reads from a hot standby: the gap-safe log stays gap-safe there, and the standby's store
refuses every write with an error naming the setting that routed reads to it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from log_reading import read_everything, read_until
from standby_cluster import StandbyPair, migrated_standby_pair, wait_for_replay

from events import EventStore, NewEvent
from events.errors import ReadOnlyStore
from events.eventstore.read_only import ReadOnlyEventStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOURCE = "SAGAFLEET_READ_DATABASE_URL"


@pytest.fixture(scope="module")
def pair() -> Iterator[StandbyPair]:
    """A primary and a hot standby of it, shared by this module's tests."""
    with migrated_standby_pair() as started:
        yield started


@pytest.fixture
def primary(pair: StandbyPair) -> Iterator[EventStore]:
    with EventStore.connect(pair.primary, pool_size=6) as store:
        yield store


@pytest.fixture
def standby(pair: StandbyPair) -> Iterator[ReadOnlyEventStore]:
    with ReadOnlyEventStore.open(pair.standby, source=SOURCE) as store:
        yield store


def test_a_late_commit_with_a_lower_position_is_never_skipped_on_the_standby(
    pair: StandbyPair, primary: EventStore, standby: ReadOnlyEventStore
) -> None:
    # given a reader on the standby that checkpoints after everything it can read
    primary.append("early", [NewEvent("E", {})])
    wait_for_replay(pair.primary, pair.standby)
    seen = read_until(standby, None, 1)
    checkpoint = seen[-1].position

    with psycopg.connect(primary.conninfo) as held:
        # when an append on the primary takes a position and stays uncommitted
        slow = primary.append("slow", [NewEvent("Slow", {})], conn=held)
        # and later appends (higher positions) commit, and the standby replays them
        for n in range(3):
            primary.append("fast", [NewEvent("Fast", {"n": n})])
        wait_for_replay(pair.primary, pair.standby)
        fast = [e.position.global_position for e in standby.read_stream("fast")]
        assert len(fast) == 3
        assert slow.events[0].position.global_position < min(fast)

        # then a naive "position > last" reader on the standby would move past the hole...
        with standby.connection() as conn:
            naive = [row[0] for row in conn.execute(
                "SELECT global_position FROM eventstore.events WHERE global_position > %s"
                " ORDER BY global_position", (checkpoint.global_position,))]
        assert naive == fast
        # ...while the gap-safe read on the standby stops below the open transaction
        assert read_everything(standby, checkpoint) == []

        held.commit()

    # then once the commit is replayed, the standby yields every event from the checkpoint
    after = read_until(standby, checkpoint, 4)
    assert [e.stream_id for e in after] == ["slow", "fast", "fast", "fast"]
    assert [e.position for e in after] == sorted(e.position for e in after)


def test_the_standby_store_refuses_writes_naming_the_setting(
    primary: EventStore, standby: ReadOnlyEventStore
) -> None:
    # given the standby's read-only store (what SAGAFLEET_READ_DATABASE_URL opens)
    # when a command tries to append, write a unit of work, migrate or follow the log there
    # then each is refused with a typed error that names the setting
    with pytest.raises(ReadOnlyStore, match=SOURCE):
        standby.append("s", [NewEvent("E", {})])
    with pytest.raises(ReadOnlyStore, match=SOURCE), standby.transaction():
        pass
    with pytest.raises(ReadOnlyStore, match=SOURCE):
        standby.migrate()
    with pytest.raises(ReadOnlyStore, match=SOURCE):
        standby.subscription("projector")
    # and the checkpoint a lag report wants is still readable there
    assert standby.checkpoint("nobody") is None


def test_a_read_only_store_on_the_primary_cannot_write_through_a_borrowed_connection(
    primary: EventStore, pair: StandbyPair
) -> None:
    # given a read-only store opened on the primary (a read command with no replica set)
    with ReadOnlyEventStore.open(pair.primary, source="the primary opened read-only") as reads:
        # when a caller writes SQL through a borrowed connection, then the server refuses it
        with pytest.raises(ReadOnlyStore, match="read-only transaction"), \
                reads.connection() as conn:
            conn.execute("DELETE FROM eventstore.checkpoints")
        # and reads work as on the primary's own store
        primary.append("read-only-check", [NewEvent("E", {})])
        assert [e.type for e in reads.read_stream("read-only-check")] == ["E"]


def test_replay_lag_is_zero_when_caught_up_and_none_on_a_primary(
    pair: StandbyPair, primary: EventStore, standby: ReadOnlyEventStore
) -> None:
    # given a standby that has replayed everything
    primary.append("lag", [NewEvent("E", {})])
    wait_for_replay(pair.primary, pair.standby)
    # then its lag is a number of seconds (0 when caught up), and a primary has none
    lag = standby.replay_lag_seconds()
    assert lag is not None and lag >= 0
    with ReadOnlyEventStore.open(pair.primary, source="primary") as on_primary:
        assert on_primary.replay_lag_seconds() is None
