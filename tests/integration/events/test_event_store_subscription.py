"""Subscriptions: checkpoint and read model commit together; one consumer per name."""

from __future__ import annotations

import threading
import time

import pytest

from events import (
    CheckpointConflict,
    EventStore,
    NewEvent,
    Subscription,
    SubscriptionBusy,
)

pytestmark = pytest.mark.integration


def drain(sub: Subscription, want: int, limit: int = 3) -> int:
    """Project batches into the ``seen`` table until ``want`` events were applied."""
    applied, deadline = 0, time.monotonic() + 20
    while applied < want and time.monotonic() < deadline:
        with sub.next_batch(limit=limit) as batch:
            for event in batch.events:
                batch.connection.execute(
                    "INSERT INTO seen VALUES (%s, %s)", (event.stream_id, event.stream_version)
                )
            applied += len(batch.events)
        if not batch.events:
            sub.wait(0.1)
    return applied


def seen(store: EventStore) -> list[tuple[str, int]]:
    with store.connection() as conn:
        return [(s, v) for s, v in conn.execute("SELECT s, v FROM seen ORDER BY s, v")]


@pytest.fixture
def projected(store: EventStore) -> EventStore:
    """A store with a read-model table ``seen(s, v)`` whose primary key forbids replays."""
    with store.connection() as conn:
        conn.execute("CREATE TABLE seen (s text, v bigint, PRIMARY KEY (s, v))")
    return store


def test_batches_advance_the_checkpoint_with_the_read_model(projected: EventStore) -> None:
    # given seven events in two streams
    for n in range(4):
        projected.append("a", [NewEvent("A", {"n": n})])
    projected.append("b", [NewEvent("B", {}), NewEvent("B", {}), NewEvent("B", {})])

    # when a subscription projects them in batches of three
    with projected.subscription("seen") as sub:
        assert drain(sub, 7) == 7
        checkpoint = sub.checkpoint()

    # then every event was applied exactly once and the checkpoint is at the last one
    assert seen(projected) == [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 1), ("b", 2), ("b", 3)]
    assert checkpoint == projected.head_position()

    # and a restarted consumer resumes from the checkpoint with nothing left to do
    with projected.subscription("seen") as again, again.next_batch() as batch:
        assert batch.events == []


def test_a_failing_batch_rolls_back_read_model_and_checkpoint(projected: EventStore) -> None:
    # given two events and a consumer
    projected.append("a", [NewEvent("A", {}), NewEvent("A", {})])
    with projected.subscription("seen") as sub:
        # when the projection fails half-way through a batch
        with pytest.raises(RuntimeError), sub.next_batch() as batch:
            batch.connection.execute("INSERT INTO seen VALUES ('a', 1)")
            raise RuntimeError("projection bug")

        # then neither the row nor the checkpoint moved, and the retry sees both events
        assert seen(projected) == [] and sub.checkpoint() is None
        assert drain(sub, 2) == 2
    assert seen(projected) == [("a", 1), ("a", 2)]


def test_stop_before_keeps_the_rest_of_the_batch_for_later(projected: EventStore) -> None:
    # given three events
    projected.append("a", [NewEvent("A", {}) for _ in range(3)])
    with projected.subscription("seen") as sub:
        # when a consumer applies the first and stops before the second
        with sub.next_batch() as batch:
            assert len(batch.events) == 3
            batch.connection.execute("INSERT INTO seen VALUES ('a', 1)")
            batch.stop_before(batch.events[1])
        # then the next batch starts at the second event
        with sub.next_batch() as batch:
            assert [e.stream_version for e in batch.events] == [2, 3]


def test_only_one_consumer_holds_a_subscription(projected: EventStore) -> None:
    projected.append("a", [NewEvent("A", {})])
    with projected.subscription("seen") as first, projected.subscription("seen") as second:
        # given the first consumer holds the subscription
        assert first.try_acquire()
        # when a second copy tries, then it is refused
        assert not second.try_acquire()
        with pytest.raises(SubscriptionBusy), second.next_batch():
            pass
        # when the first goes away, then the second takes over
        first.close()
        assert second.try_acquire()
        assert drain(second, 1) == 1


def test_the_checkpoint_only_moves_forward(projected: EventStore) -> None:
    projected.append("a", [NewEvent("A", {})])
    head = projected.head_position()
    assert head is not None
    with projected.subscription("seen") as sub:
        # given another writer moved the checkpoint past this batch while it was processed
        with pytest.raises(CheckpointConflict), sub.next_batch() as batch:
            batch.connection.execute("INSERT INTO seen VALUES ('a', 1)")
            with projected.connection() as other:
                other.execute(
                    "INSERT INTO eventstore.checkpoints (name, last_xid, last_position)"
                    " VALUES ('seen', %s::text::xid8, %s)",
                    (str(head.transaction_id + 1), head.global_position),
                )
        # then the batch rolled back instead of moving the checkpoint backwards
        assert seen(projected) == []


def test_wait_wakes_on_append_and_times_out_when_idle(projected: EventStore) -> None:
    # (the stream exists first, so the wake-up comes from the one-event fast path)
    projected.append("a", [NewEvent("A", {})])
    assert projected.wake_ups_sent()
    with projected.subscription("seen") as sub:
        # given an idle log, when waiting briefly, then it times out
        assert sub.wait(0.2) is False

        # when another thread appends while we wait, then wait returns early
        timer = threading.Timer(0.2, lambda: projected.append("a", [NewEvent("A", {})]))
        timer.start()
        started = time.monotonic()
        assert sub.wait(10.0) is True
        assert time.monotonic() - started < 9.0
        timer.join()


def test_a_consumer_catching_up_does_not_pile_up_wake_ups(projected: EventStore) -> None:
    # given a subscription that listens while a long backlog is appended and consumed
    with projected.subscription("seen") as sub:
        sub.wait(0.01)  # connects and LISTENs
        for n in range(200):
            projected.append(f"s{n % 7}", [NewEvent("A", {"n": n})])
        # (the store sends its wake-ups after the commits: all of them went out by now)
        assert projected.wake_ups_sent()
        consumed, deadline = 0, time.monotonic() + 20
        while consumed < 200 and time.monotonic() < deadline:  # batches only, no wait()
            with sub.next_batch(limit=50) as batch:
                consumed += len(batch.events)
            if not batch.events:
                time.sleep(0.05)
        assert consumed == 200
        # then the driver holds no queued notifications (it would keep one per append for
        # as long as the consumer is busy: the projector's memory grew with the log)
        connection = sub._connection()
        assert not connection._notifies_backlog  # psycopg's queue of unread NOTIFYs
        # and the wake-ups that came meanwhile are not lost: the next wait returns at once
        started = time.monotonic()
        assert sub.wait(10.0) is True
        assert time.monotonic() - started < 5.0
        # while an idle log still times out
        assert sub.wait(0.2) is False
