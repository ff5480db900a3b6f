"""The event store across a PostgreSQL failover: a primary and a streaming standby started
here from the machine's binaries (``scripts/failover_run/servers.py``, the failover run's
own), one URL naming both with ``target_session_attrs=read-write``. The primary is killed
(every process frozen, then SIGKILLed) and the standby promoted; or the primary is fenced
(``default_transaction_read_only``), as a failover tool does to a primary it demotes.

What must hold: the store drops what it held on the lost server and carries on against the
new primary without a restart; a subscription listens and takes its lock again there; the
console's live feed announces again; a read-only store on the same URL reads the primary.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from events import EventStore, NewEvent
from events.errors import StoreUnavailable
from events.eventstore.read_only import ReadOnlyEventStore
from sagafleet.console.live import LiveHub, StreamOwner
from sagafleet.system_postgres import Control, find_bin_dir, run_as_user

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from failover_run.servers import PostgresNode, PostgresPair, free_port  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def pair() -> Iterator[PostgresPair]:
    """A primary and a standby streaming from it (asynchronously), stopped afterwards."""
    bin_dir = find_bin_dir()
    if bin_dir is None or not (bin_dir / "pg_basebackup").is_file():
        pytest.skip("no PostgreSQL server binaries with pg_basebackup: apt install postgresql")
    user = run_as_user()
    with tempfile.TemporaryDirectory(prefix="sf-pair-") as root:
        started = PostgresPair(PostgresNode(Control(bin_dir, Path(root) / "a", user), free_port()),
                               PostgresNode(Control(bin_dir, Path(root) / "b", user), free_port()),
                               "async")
        try:
            started.start()
            yield started
        finally:
            started.stop()


@pytest.fixture
def store(pair: PostgresPair) -> Iterator[EventStore]:
    """A writing store on the URL naming both servers, migrated."""
    with EventStore.connect(pair.url("postgres"), pool_size=4, timeout=5.0) as opened:
        opened.migrate()
        yield opened


def _hold_connections(store: EventStore, count: int) -> None:
    """Borrow ``count`` connections at once and give them back: the store keeps them."""
    loans = [store.connection() for _ in range(count)]
    for loan in loans:
        loan.__enter__().execute("SELECT 1")
    for loan in loans:
        loan.__exit__(None, None, None)


def _fail_over(pair: PostgresPair) -> None:
    pair.kill_primary()
    pair.promote_standby()


def test_the_store_its_subscription_and_a_read_only_store_carry_on_on_the_promoted_standby(
    pair: PostgresPair, store: EventStore
) -> None:
    # given a store holding several connections to the primary, a subscription that holds
    # its lock and has read what there is, and a read command's store on the same URL
    store.append("s", [NewEvent("E", {"n": 1})])
    _hold_connections(store, 4)
    with store.subscription("follower") as follower, ReadOnlyEventStore.open(
            pair.url("postgres"), source="the primary opened read-only", timeout=5.0) as reads:
        with follower.next_batch() as batch:
            assert [e.data for e in batch.events] == [{"n": 1}]
        assert follower.is_owner and follower.session == 1
        # (its own read-only session does not make libpq's read-write refuse every server)
        assert [e.type for e in reads.read_stream("s")] == ["E"]
        # when the primary dies and the standby is promoted
        _fail_over(pair)
        # then the store's first write meets a lost connection and says it is unavailable...
        with pytest.raises(StoreUnavailable):
            store.append("s", [NewEvent("E", {"n": 2})])
        # ...and that one failure cleared every connection to the dead server: the next
        # write goes to the new primary at once, no restart
        store.append("s", [NewEvent("E", {"n": 2})])
        with store.connection() as conn:
            row = conn.execute("SELECT inet_server_port(), pg_is_in_recovery()").fetchone()
        assert row == (pair.primary.port, False)
        # and the subscription: waiting on its lost connection says so, and the next batch
        # is read on a new session that took the lock again and listens again
        with pytest.raises(StoreUnavailable):
            follower.wait(0.1)
        with follower.next_batch() as batch:
            assert [e.data for e in batch.events] == [{"n": 2}]
        assert follower.is_owner and follower.session == 2
        with psycopg.connect(pair.url("postgres"), autocommit=True) as other:
            held = other.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                 " AND granted").fetchone()
        assert held == (1,)
        store.append("s", [NewEvent("E", {"n": 3})])
        assert follower.wait(30.0)  # a NOTIFY from the new primary wakes it
        # and the read-only store reads the promoted standby
        assert _read_when_back(reads, "s") == ["E", "E", "E"]


def test_the_console_live_feed_announces_again_after_a_failover(
    pair: PostgresPair, store: EventStore
) -> None:
    # given the console's live hub on the store, with one page subscribed
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    hub = LiveHub(store, poll_s=0.2)
    subscribed = threading.Event()

    async def first_announcement() -> int:
        async with hub.subscription(StreamOwner("s1", "acme", "ana")) as queue:
            subscribed.set()
            return await queue.get()

    try:
        hub.start(loop)
        announced = asyncio.run_coroutine_threadsafe(first_announcement(), loop)
        assert subscribed.wait(30)
        # when the primary dies, the standby is promoted, and the read models move there
        _fail_over(pair)
        position = 0
        while not announced.done() and position < 300:  # bounds a hung hub, nothing more
            position += 1
            _move_read_model(store, position)
            store.append("moved", [NewEvent("E", {})])
            announced_or_not = _wait_done(announced, 0.2)
            if announced_or_not:
                break
        # then the hub, listening again on the new primary, announced it
        assert announced.result(timeout=0) >= 1
    finally:
        hub.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def _move_read_model(store: EventStore, position: int) -> None:
    """A read model's checkpoint moves (what the hub watches), riding out the failover."""
    try:
        with store.connection() as conn:
            conn.execute(
                "INSERT INTO eventstore.checkpoints (name, last_xid, last_position)"
                " VALUES ('read-model', '1'::xid8, %s) ON CONFLICT (name)"
                " DO UPDATE SET last_position = EXCLUDED.last_position", (position,))
    except StoreUnavailable:
        pass  # the connection the failover broke; the next turn has a new one


def _wait_done(future: object, seconds: float) -> bool:
    """Whether ``future`` (a concurrent future) finished within ``seconds``."""
    import concurrent.futures

    try:
        future.result(timeout=seconds)  # type: ignore[attr-defined]
    except concurrent.futures.TimeoutError:
        return False
    return True


def _read_when_back(reads: ReadOnlyEventStore, stream: str) -> list[str]:
    """The stream's event types once the read-only store reaches a server again."""
    for _ in range(3):
        try:
            return [e.type for e in reads.read_stream(stream)]
        except StoreUnavailable:
            continue
    raise AssertionError("the read-only store never reached the promoted standby")


@pytest.fixture
def primary() -> Iterator[PostgresNode]:
    """One PostgreSQL server (a primary with no standby), stopped afterwards."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries: apt install postgresql")
    with tempfile.TemporaryDirectory(prefix="sf-fence-") as root:
        node = PostgresNode(Control(bin_dir, Path(root) / "a", run_as_user()), free_port())
        try:
            node.initdb()
            node.start()
            yield node
        finally:
            node.stop()


def test_a_fenced_primary_is_a_failover_not_a_misconfiguration(primary: PostgresNode) -> None:
    # given a writing store on the primary (read-write asked of it)
    with EventStore.connect(primary.url() + "&target_session_attrs=read-write",
                            pool_size=4, timeout=2.0) as store:
        store.migrate()
        store.append("f", [NewEvent("E", {})])
        _hold_connections(store, 3)
        # when a failover tool fences it (read-only for every session, as before a demotion)
        with psycopg.connect(primary.url(), autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            admin.execute("SELECT pg_reload_conf()")
        try:
            # then, once the fence reaches the session (a backend reloads its settings before
            # the command after the one it was idle for), a write is refused as unavailable
            # (a retry may reach a new primary), not as the misconfiguration of a URL naming
            # a standby
            refused = None
            for _ in range(10):
                try:
                    store.append("f", [NewEvent("E", {})])
                except StoreUnavailable as exc:
                    refused = exc
                    break
            assert refused is not None and "refused a write as read-only" in str(refused)
            # and the store kept none of its connections there: the next write tries a new
            # one, which read-write refuses at connect time
            with pytest.raises(StoreUnavailable, match="no database connection available"):
                store.append("f", [NewEvent("E", {})])
        finally:
            with psycopg.connect(primary.url(), autocommit=True) as admin:
                admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
                admin.execute("SELECT pg_reload_conf()")
        # and once a writable primary answers, writes go on (the pool reconnects at its
        # own pace: a write meanwhile may still find no connection)
        for _ in range(30):
            try:
                store.append("f", [NewEvent("E", {})])
                break
            except StoreUnavailable:
                continue
        assert len(store.read_stream("f")) >= 2
