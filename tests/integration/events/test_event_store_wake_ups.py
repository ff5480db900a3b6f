"""Wake-ups after commits (``events.eventstore.waking``) against the plain path, a NOTIFY
inside each append's transaction: both wake a listener, and what it reads after waking holds
the append; the notifier coalesces, survives a lost connection, a fork and closing."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from events import EventStore, NewEvent
from events.eventstore.subscription import Notifications
from events.eventstore.waking import NOTIFY_STATEMENT, RETRY_AFTER_S

pytestmark = pytest.mark.integration


@pytest.fixture(params=["after_commit", "in_commit"])
def either(request: pytest.FixtureRequest, fresh_database: str) -> Iterator[EventStore]:
    """The store notifying after commits (the default) and the plain path."""
    with EventStore.connect(fresh_database, pool_size=4,
                            notify_in_commit=request.param == "in_commit") as opened:
        opened.migrate()
        yield opened


def _woken_and_read(store: EventStore, append: object) -> int:
    """Listen, run ``append``, wait for the wake-up; the stream's length read right after."""
    with Notifications(store) as listening:
        assert callable(append)
        append()
        assert listening.wait(10.0) is True
        return len(store.read_stream("trip"))


def test_a_listener_is_woken_by_an_append_and_reads_it_on_either_path(
        either: EventStore) -> None:
    # given a listener, when an append commits on its own, then it is woken and reads it
    assert _woken_and_read(either, lambda: either.append("trip", [NewEvent("A", {})])) == 1

    # and so is an append in a unit of work, once the unit commits (piped or not)
    def in_unit(pipelined: bool) -> None:
        with either.transaction(pipelined=pipelined) as unit:
            unit.append("trip", [NewEvent("A", {})])

    assert _woken_and_read(either, lambda: in_unit(True)) == 2
    assert _woken_and_read(either, lambda: in_unit(False)) == 3


def test_a_rolled_back_unit_wakes_nobody(either: EventStore) -> None:
    either.append("trip", [NewEvent("A", {})])
    assert either.wake_ups_sent()
    with Notifications(either) as listening:
        # when a unit appends and then fails, then nothing is committed and nobody woken
        with pytest.raises(RuntimeError), either.transaction(pipelined=True) as unit:
            unit.append("trip", [NewEvent("A", {})])
            raise RuntimeError("the caller changed its mind")
        assert listening.wait(0.5) is False
    assert len(either.read_stream("trip")) == 1


def test_an_append_on_a_callers_connection_notifies_in_its_transaction(
        store: EventStore) -> None:
    # given an append joined to a caller's transaction (whose commit the store cannot see)
    with Notifications(store) as listening:
        with store.connection() as conn, conn.transaction():
            store.append("trip", [NewEvent("A", {})], conn=conn)
            # then the wake-up waits for that commit, as the plain path's does
            assert listening.wait(0.3) is False
        assert listening.wait(10.0) is True
    assert store.wake_ups_sent() and store._notifier is not None
    assert store._notifier.sent == 0  # the notifier sent nothing for it


def test_many_appends_from_many_threads_are_announced_by_few_notifies(store: EventStore) -> None:
    notifier = store._notifier
    assert notifier is not None

    def appends(n: int) -> None:
        for i in range(50):
            store.append(f"trip-{n}", [NewEvent("A", {"i": i})])

    with Notifications(store) as listening:
        threads = [threading.Thread(target=appends, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert store.wake_ups_sent()
        # then the listener was woken, and every append is there to read
        assert listening.wait(5.0) is True
        assert sum(len(store.read_stream(f"trip-{n}")) for n in range(4)) == 200
    # and 200 commits were announced by fewer NOTIFYs than commits (at most one in flight
    # and one per interval), at least one of them after the last commit
    assert 1 <= notifier.sent < 200


def test_a_lost_notifier_connection_fails_no_append_and_is_replaced(store: EventStore) -> None:
    store.append("trip", [NewEvent("A", {})])
    assert store.wake_ups_sent()
    # given the notifier's backend is terminated (its server restarted it, a proxy dropped it)
    with store.connection() as conn:
        ended = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE query = %s AND pid <> pg_backend_pid()",
            (NOTIFY_STATEMENT.decode(),)).fetchone()
    assert ended == (1,)
    with Notifications(store) as listening:
        # when the next appends commit, then they succeed
        store.append("trip", [NewEvent("A", {})])
        store.append("trip", [NewEvent("A", {})])
        # and their wake-up comes once the notifier connected again
        assert listening.wait(RETRY_AFTER_S + 10.0) is True
    assert len(store.read_stream("trip")) == 3


def test_a_forked_child_sends_its_own_wake_ups(store: EventStore) -> None:
    # given the parent's notifier is running
    store.append("trip", [NewEvent("A", {})])
    assert store.wake_ups_sent()
    notifier = store._notifier
    assert notifier is not None
    context = multiprocessing.get_context("fork")
    done: multiprocessing.Queue = context.Queue()

    def wakes_in_child() -> None:
        notifier.wake()  # the parent's notifier object, in the child
        done.put(notifier.settled(10.0) and notifier.sent == 1)

    with Notifications(store) as listening:
        child = context.Process(target=wakes_in_child)
        child.start()
        assert done.get(timeout=30) is True
        child.join(30)
        assert child.exitcode == 0
        # then the child's own thread and connection sent the NOTIFY that woke us
        assert listening.wait(10.0) is True
    # and the parent's notifier is untouched
    assert notifier.sent == 1
    with Notifications(store) as listening:
        store.append("trip", [NewEvent("A", {})])
        assert listening.wait(10.0) is True


def test_closing_sends_the_wake_up_still_asked_for(fresh_database: str) -> None:
    with EventStore.connect(fresh_database, pool_size=2) as opened:
        opened.migrate()
    store = EventStore.connect(fresh_database, pool_size=2)
    with Notifications(store) as listening:
        store.append("trip", [NewEvent("A", {})])
        store.close()  # at once, before the notifier's thread may have run
        assert listening.wait(10.0) is True
    assert store._notifier is not None and store._notifier.sent == 1
    threads = [t.name for t in threading.enumerate()]
    assert "eventstore-notifier" not in threads


def test_a_store_that_does_not_notify_starts_no_notifier(fresh_database: str) -> None:
    with EventStore.connect(fresh_database, pool_size=2, notify=False) as quiet:
        quiet.migrate()
        with Notifications(quiet) as listening:
            quiet.append("trip", [NewEvent("A", {})])
            assert listening.wait(0.3) is False
        assert quiet._notifier is None and quiet.wake_ups_sent(0)


def test_a_process_that_exits_without_closing_its_store_still_wakes_listeners(
        store: EventStore) -> None:
    # given a listener, when a one-shot process appends and exits without closing its store
    script = ("import sys; from events import EventStore, NewEvent; "
              "EventStore.connect(sys.argv[1], pool_size=1).append('trip', [NewEvent('A', {})])")
    with Notifications(store) as listening:
        done = subprocess.run([sys.executable, "-c", script, store.conninfo],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        # then the wake-up it owed went out as it exited
        assert listening.wait(10.0) is True
    assert len(store.read_stream("trip")) == 1
