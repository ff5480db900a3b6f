"""Benchmark the event store against raw psycopg on the same database, in the same run.

Prints medians and ratios (raw time / store time, same run; target >= 0.8, issue 21) for:
single-event appends, 100-event appends, read_all paging and subscription batches; the cost
of NOTIFY; and how append and read_stream latency grow as the log fills from 10 thousand to
1 million events (target <= 1.3x). ``--quick`` stops at 100 thousand.

The baselines are what a user would write by hand with plain psycopg, same table shape:

* appends: one autocommit INSERT (or one multi-row VALUES for 100 events) into
  ``bench_raw``, a table with the events table's columns and indexes (the issue's "same
  columns and indexes"): its rows carry a fixed 64-character text in both hash columns, so
  the baseline computes no chain, and it has no stream head to move (the store must do both);
* for reference, not the target: the raw single-event INSERT behind a stream head, in one
  statement (``bench_raw_heads``, the shape of ``eventstore.streams``; the head moves from
  the version the writer expects, as a store with optimistic concurrency and a due-time
  index must): the store's ratio to it shows what of the gap is the head;
* read_all: keyset pages of 1,000 (``global_position > last``) over ``eventstore.events``,
  the same columns, binary plain tuples, psycopg's default jsonb loading;
* subscription: the same keyset pages in a transaction that also writes the reader's
  checkpoint row (BEGIN, page, upsert, COMMIT), as a checkpointed reader must.

    .venv/bin/python scripts/bench_store.py            # embedded PostgreSQL, full run
    .venv/bin/python scripts/bench_store.py --quick --url postgresql://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any, Final

import psycopg
from bench_databases import drop_database, new_database, postgres_server

from events import EventStore, NewEvent, Position, new_event_id
from events.eventstore.hashing import chain_hash, hash_body
from events.eventstore.model import GENESIS_HASH
from events.eventstore.subscription import Subscription
from events.integrity.anchors import AnchorKey, AnchorLoop

FILLER_TIME = datetime(2026, 1, 1, tzinfo=UTC)  # layout 1 does not hash it

TARGET_RATIO = 0.8
"""Issue 21: the store at >= 0.8x its hand-written baseline, same run."""

PAYLOAD = {"saga": "trip", "step": "hotel", "provider": "sandbox", "note": "x" * 120}

# eventstore.events as migrated: the same columns and indexes (events migrations 0001, 0008,
# 0011).
RAW_TABLE = """
CREATE TABLE bench_raw (
    global_position bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
    transaction_id  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    stream_id text NOT NULL, stream_version bigint NOT NULL, event_id uuid NOT NULL UNIQUE,
    event_type text NOT NULL, schema_version integer NOT NULL, data jsonb NOT NULL,
    metadata jsonb NOT NULL, tenant_id text, prev_hash text NOT NULL, event_hash text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(), hash_version smallint NOT NULL DEFAULT 1,
    UNIQUE (stream_id, stream_version)
);
CREATE INDEX ON bench_raw (transaction_id, global_position);
CREATE INDEX ON bench_raw (tenant_id, (metadata ->> 'saga_trace_id'), global_position)
    WHERE metadata ? 'saga_trace_id';
"""

# The strongest plain-psycopg baselines we found: a scalar single-row INSERT, and one
# multi-row VALUES statement for batches (faster than unnest arrays or executemany here).
RAW_COLUMNS = ("stream_id, stream_version, event_id, event_type, schema_version, data, metadata,"
               " prev_hash, event_hash")
RAW_ROW = "(%s, %s, %s, 'Bench', 1, %s, '{}', %s, %s)"
RAW_HASH = "ab" * 32
"""What the baseline writes in each hash column: a hash's length, no hashing."""


WARM_CALLS: Final = 128
"""Untimed calls each op makes before it is timed (twice the appenders' 64 streams)."""


def median_ms(samples: list[float]) -> float:
    """Median of seconds, in milliseconds."""
    return statistics.median(samples) * 1000


def interleaved(
    ops: dict[str, Callable[[], object]], times: int, *, warm: int = WARM_CALLS
) -> dict[str, float]:
    """Median latency (ms) per op, the ops taking turns call by call (in alternating order),
    so that whatever the machine does meanwhile falls on every op alike. Each op first runs
    ``warm`` untimed calls in the same turns: the steady state is measured, not the first
    writes to each page after the fill's checkpoint, a store's stream creations or the
    driver preparing its statements."""
    for _ in range(warm):
        for op in ops.values():
            op()
    samples: dict[str, list[float]] = {name: [] for name in ops}
    order = list(ops.items())
    for turn in range(times):
        for name, op in order if turn % 2 == 0 else reversed(order):
            start = time.perf_counter()
            op()
            samples[name].append(time.perf_counter() - start)
    return {name: median_ms(found) for name, found in samples.items()}


class Appender:
    """Single/batch appends rotating over streams, versions tracked for expected_version."""

    def __init__(self, store: EventStore, prefix: str, streams: int = 64) -> None:
        self.store, self.versions = store, {f"{prefix}-{n}": 0 for n in range(streams)}
        self.names, self.turn = list(self.versions), 0

    def __call__(self, count: int = 1) -> None:
        stream = self.names[self.turn % len(self.names)]
        self.turn += 1
        events = [NewEvent("Bench", PAYLOAD) for _ in range(count)]
        self.versions[stream] = self.store.append(stream, events, self.versions[stream]).version


class RawInserter:
    """The raw baseline: one autocommit INSERT (one round trip, one commit) per call."""

    def __init__(self, conn: psycopg.Connection[Any], prefix: str, streams: int = 64) -> None:
        self.conn, self.versions = conn, {f"{prefix}-{n}": 0 for n in range(streams)}
        self.names, self.turn = list(self.versions), 0
        self.statements = {
            count: f"INSERT INTO bench_raw ({RAW_COLUMNS}) VALUES " + ",".join([RAW_ROW] * count)
            for count in (1, 100)
        }

    def next_stream(self, count: int) -> tuple[str, int]:
        """The next stream in turn and its version before ``count`` more events."""
        stream = self.names[self.turn % len(self.names)]
        self.turn += 1
        first = self.versions[stream]
        self.versions[stream] = first + count
        return stream, first

    def __call__(self, count: int = 1) -> None:
        stream, first = self.next_stream(count)
        params: list[object] = []
        for version in range(first + 1, first + count + 1):
            # Serialise per row, as an application writing events must (not a cached text).
            params += [stream, version, new_event_id(), json.dumps(PAYLOAD), RAW_HASH, RAW_HASH]
        self.conn.execute(self.statements[count], params)


RAW_HEADS = """
CREATE TABLE bench_raw_heads (
    stream_id text PRIMARY KEY, version bigint NOT NULL, last_hash text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(), due_at timestamptz
);
CREATE INDEX ON bench_raw_heads (due_at) WHERE due_at IS NOT NULL;
"""
# eventstore.streams as migrated (events migrations 0001, 0003, 0009).

RAW_HEAD_INSERT = (
    "WITH head AS (UPDATE bench_raw_heads h SET version = %s, last_hash = %s,"
    " updated_at = now() WHERE h.stream_id = %s AND h.version = %s RETURNING h.version)"
    f" INSERT INTO bench_raw ({RAW_COLUMNS}) SELECT %s, head.version, %s, 'Bench', 1, %s,"
    " '{}', %s, %s FROM head"
)


class RawHeadInserter(RawInserter):
    """The reference: one raw event behind a stream head that moves from the expected
    version, in one autocommit statement (no hashing: the head gets a fixed text)."""

    def __init__(self, conn: psycopg.Connection[Any], prefix: str, streams: int = 64) -> None:
        super().__init__(conn, prefix, streams)
        with conn.cursor() as cursor:
            cursor.executemany("INSERT INTO bench_raw_heads (stream_id, version, last_hash)"
                               " VALUES (%s, 0, %s)", [(name, RAW_HASH) for name in self.names])

    def __call__(self, count: int = 1) -> None:
        stream, expected = self.next_stream(1)
        self.conn.execute(RAW_HEAD_INSERT, (
            expected + 1, RAW_HASH, stream, expected, stream, new_event_id(),
            json.dumps(PAYLOAD), RAW_HASH, RAW_HASH))


def fill(conn: psycopg.Connection[Any], upto: int, chunk: int = 100_000) -> None:
    """Bulk-load filler streams (10 events each, valid hash chains) until ``upto`` events."""
    row = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE event_type = 'Filler') FROM eventstore.events"
    ).fetchone()
    have, fillers = (int(row[0]), int(row[1])) if row else (0, 0)
    columns = (
        "stream_id, stream_version, event_id, event_type, schema_version, data, metadata,"
        " prev_hash, event_hash"
    )
    while have < upto:
        size = -(-min(chunk, upto - have) // 10) * 10  # whole filler streams only
        heads: list[tuple[str, int, str]] = []
        with conn.transaction(), conn.cursor() as cur:
            with cur.copy(f"COPY eventstore.events ({columns}) FROM STDIN") as copy:
                prev, stream = GENESIS_HASH, ""
                for n in range(size):
                    index = fillers + n
                    stream, version = f"filler-{index // 10}", index % 10 + 1
                    if version == 1:
                        prev = GENESIS_HASH
                    data = {"n": index, **PAYLOAD}
                    event_id = str(uuid.uuid4())
                    # Layout 1 (content only): the COPY names no hash version or time,
                    # and the column's default is 1.
                    body = hash_body(
                        hash_version=1,
                        stream_id=stream,
                        stream_version=version,
                        event_id=event_id,
                        event_type="Filler",
                        schema_version=1,
                        data=data,
                        metadata={},
                        tenant_id=None,
                        recorded_at=FILLER_TIME,
                    )
                    digest = chain_hash(prev, body)
                    copy.write_row(
                        (
                            stream,
                            version,
                            event_id,
                            "Filler",
                            1,
                            json.dumps(data),
                            "{}",
                            prev,
                            digest,
                        )
                    )
                    prev = digest
                    if version == 10 or n == size - 1:
                        heads.append((stream, version, digest))
            cur.executemany(
                "INSERT INTO eventstore.streams (stream_id, version, last_hash) VALUES (%s, %s, %s)"
                " ON CONFLICT (stream_id) DO UPDATE SET version = EXCLUDED.version,"
                " last_hash = EXCLUDED.last_hash",
                heads,
            )
        have, fillers = have + size, fillers + size
    with psycopg.connect(conn.info.dsn, autocommit=True) as vacuum:
        # What autovacuum would have done by now on a long-lived log.
        vacuum.execute("VACUUM (ANALYZE) eventstore.events")
        vacuum.execute("VACUUM (ANALYZE) eventstore.streams")
        # Start every measurement from the same WAL state: right after a checkpoint the
        # first write to each page logs a full-page image, whatever the log's size.
        with contextlib.suppress(psycopg.Error):
            vacuum.execute("CHECKPOINT")


def concurrent_throughput(store: EventStore, threads: int, per_thread: int) -> float:
    """Appends per second with ``threads`` writers, each on its own streams."""
    barrier = threading.Barrier(threads + 1)

    def writer(index: int) -> None:
        append = Appender(store, f"conc-{uuid.uuid4().hex[:6]}-{index}", streams=8)
        barrier.wait()
        for _ in range(per_thread):
            append()

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return threads * per_thread / (time.perf_counter() - start)


def run(url: str, quick: bool, ops: int, anchor_interval: float = 0.0) -> dict[str, Any]:
    """All measurements against one fresh database; returns the figures. With
    ``anchor_interval`` > 0, signed checkpoints are taken that often all along (on a store of
    their own, as the projector would), to measure what anchoring costs the appends."""
    results: dict[str, Any] = {}
    with (
        EventStore.connect(url, pool_size=16) as store,
        EventStore.connect(url, pool_size=16, notify=False) as quiet,
        EventStore.connect(url, pool_size=2) as anchoring,
        psycopg.connect(url, autocommit=True) as raw,
    ):
        store.migrate()
        loop = (
            AnchorLoop(anchoring, AnchorKey(secrets.token_bytes(32)), anchor_interval).start()
            if anchor_interval > 0 else None
        )
        try:
            _measure(store, quiet, raw, results, quick, ops)
        finally:
            if loop is not None:
                loop.stop()
                results["checkpoints_taken"] = loop.taken
    return results


def _measure(  # noqa: PLR0913, PLR0917 - the run's open handles, passed along
    store: EventStore,
    quiet: EventStore,
    raw: psycopg.Connection[Any],
    results: dict[str, Any],
    quick: bool,
    ops: int,
) -> None:
    """Every measurement, into ``results``."""
    raw.execute(RAW_TABLE.encode())
    raw.execute(RAW_HEADS.encode())
    results["server"] = " ".join(
        f"{name}={raw.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
        for name in ("server_version", "fsync", "synchronous_commit", "shared_buffers")
    )
    fill(raw, 10_000)

    single = interleaved({"store": Appender(store, "one"), "raw": RawInserter(raw, "one")}, ops)
    results["single_append_ms"] = single
    results["single_append_ratio"] = single["raw"] / single["store"]
    # The reference in turns of its own: a third op in the same turns slows them all (the
    # store most: it runs the most code), so it would change the target's figure.
    headed = interleaved({"store": Appender(store, "one-ref"),
                          "raw_head": RawHeadInserter(raw, "head")}, ops)
    results["single_append_head_ms"] = headed
    results["single_append_head_ratio"] = headed["raw_head"] / headed["store"]

    store_batch, raw_batch = Appender(store, "hundred"), RawInserter(raw, "hundred")
    batch = interleaved(
        {"store": lambda: store_batch(100), "raw": lambda: raw_batch(100)}, ops // 4
    )
    results["batch100_append_ms"] = batch
    results["batch100_append_ratio"] = batch["raw"] / batch["store"]

    results["read_all_page1000_ms"] = paging(store, raw)
    page = results["read_all_page1000_ms"]
    results["read_all_ratio"] = page["raw"] / page["store"]

    results["subscription_batch1000_ms"] = subscription_paging(store, raw)
    batches = results["subscription_batch1000_ms"]
    results["subscription_ratio"] = batches["raw"] / batches["store"]

    notify = interleaved(
        {"notify_on": Appender(store, "n1"), "notify_off": Appender(quiet, "n0")}, ops
    )
    results["notify_single_append_ms"] = notify
    results["notify_concurrent_8x_appends_per_s"] = {
        "notify_on": concurrent_throughput(store, 8, ops // 4),
        "notify_off": concurrent_throughput(quiet, 8, ops // 4),
    }

    results["growth"] = growth(
        store, raw, [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000], ops
    )


RAW_PAGE = (
    "SELECT stream_id, stream_version, event_id, event_type, schema_version, data,"
    " metadata, recorded_at, transaction_id::text::bigint, global_position,"
    " event_hash, prev_hash, tenant_id FROM eventstore.events"
    " WHERE global_position > %s"
    " ORDER BY global_position LIMIT 1000"
)
"""The hand-written keyset page: same columns as the store reads, plain tuples."""


def raw_page(raw: psycopg.Connection[Any], last: int) -> list[tuple[Any, ...]]:
    """One hand-written keyset page of 1,000 events after position ``last``."""
    return raw.cursor(binary=True).execute(RAW_PAGE, (last,)).fetchall()


def paging(store: EventStore, raw: psycopg.Connection[Any]) -> dict[str, float]:
    """Median time of a 1000-event page: store.read_all vs the same rows by raw SELECT,
    page by page in turns (the order alternating), over the whole log three times."""
    samples: dict[str, list[float]] = {"store": [], "raw": []}
    for turn in range(3):
        after: Position | None = None
        last = 0
        while True:
            pages = _timed_in_turns(
                {
                    "store": partial(store.read_all, after=after, limit=1000),
                    "raw": partial(raw_page, raw, last),
                },
                turn,
                samples,
            )
            if len(pages["store"]) < 1000:
                break
            after, last = pages["store"][-1].position, pages["raw"][-1][9]
    return {name: median_ms(found) for name, found in samples.items()}


def subscription_paging(store: EventStore, raw: psycopg.Connection[Any]) -> dict[str, float]:
    """Median time of a 1000-event subscription batch (read, checkpoint, commit) vs a
    hand-written checkpointed keyset reader doing the same in one transaction."""
    raw.execute(
        "CREATE TABLE IF NOT EXISTS bench_checkpoint (name text PRIMARY KEY, last bigint)"
    )
    samples: dict[str, list[float]] = {"store": [], "raw": []}
    for turn in range(3):
        with store.subscription(f"bench-{uuid.uuid4().hex[:8]}") as subscription:
            reader = CheckpointedReader(raw, f"bench-{turn}")

            def store_batch(subscription: Subscription = subscription) -> int:
                with subscription.next_batch(limit=1000) as batch:
                    return len(batch.events)

            while _timed_in_turns({"store": store_batch, "raw": reader}, turn, samples)[
                "store"
            ] == 1000:
                continue
    return {name: median_ms(found) for name, found in samples.items()}


class CheckpointedReader:
    """The hand-written subscription: keyset pages, the cursor kept in memory and written
    to its checkpoint row in the page's transaction."""

    def __init__(self, raw: psycopg.Connection[Any], name: str) -> None:
        self.raw, self.name, self.last = raw, name, 0

    def __call__(self) -> int:
        with self.raw.transaction():
            rows = raw_page(self.raw, self.last)
            if rows:
                self.last = rows[-1][9]
                self.raw.execute(
                    "INSERT INTO bench_checkpoint VALUES (%s, %s)"
                    " ON CONFLICT (name) DO UPDATE SET last = EXCLUDED.last",
                    (self.name, self.last),
                )
        return len(rows)


def _timed_in_turns(
    ops: dict[str, Callable[[], Any]], turn: int, samples: dict[str, list[float]]
) -> dict[str, Any]:
    """Run each op once, timed into ``samples`` (order alternating with ``turn``); what
    each returned."""
    returned: dict[str, Any] = {}
    order = list(ops.items())
    for name, op in order if turn % 2 == 0 else reversed(order):
        start = time.perf_counter()
        returned[name] = op()
        samples[name].append(time.perf_counter() - start)
    return returned


def growth(
    store: EventStore, raw: psycopg.Connection[Any], sizes: list[int], ops: int
) -> dict[str, Any]:
    """Append, read_stream and tail read_all latency (median ms) at each log size."""
    probe = "probe-stream"
    if store.stream_version(probe) == 0:
        store.append(probe, [NewEvent("Probe", PAYLOAD) for _ in range(20)], 0)
    table: dict[str, dict[str, float]] = {}
    for size in sizes:
        fill(raw, size)
        appender = Appender(store, f"growth-{size}")
        for _ in range(3 * len(appender.names)):  # create the streams, warm the hot pages
            appender()
        head = store.read_all(after=None, limit=1)  # warm the plan cache
        tail = _position_before_tail(raw, 100)
        medians = interleaved(
            {
                "append_ms": appender,
                "read_stream20_ms": lambda: store.read_stream(probe, to_version=20),
                "read_all_tail100_ms": lambda: store.read_all(after=tail, limit=100),  # noqa: B023
            },
            ops,
        )
        assert head, "the log is empty"
        table[str(size)] = medians
    first, last = table[str(sizes[0])], table[str(sizes[-1])]
    return {
        "by_size": table,
        "append_growth": last["append_ms"] / first["append_ms"],
        "read_stream_growth": last["read_stream20_ms"] / first["read_stream20_ms"],
        "read_all_tail_growth": last["read_all_tail100_ms"] / first["read_all_tail100_ms"],
    }


def _position_before_tail(raw: psycopg.Connection[Any], events: int) -> Position:
    """A cursor ``events`` events before the head of the log (a subscriber keeping up)."""
    row = raw.execute(
        "SELECT transaction_id::text::bigint, global_position FROM eventstore.events"
        " ORDER BY transaction_id DESC, global_position DESC OFFSET %s LIMIT 1",
        (events,),
    ).fetchone()
    assert row is not None
    return Position(int(row[0]), int(row[1]))


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A new database on the server for this run, dropped afterwards."""
    url = new_database(server_url, "bench_store")
    try:
        yield url
    finally:
        drop_database(server_url, url)


def report(results: dict[str, Any]) -> None:
    """Print the figures for humans."""

    def pair(key: str, a: str = "store", b: str = "raw") -> str:
        figures = results[key]
        return f"{a} {figures[a]:.3f} ms | {b} {figures[b]:.3f} ms"

    ratios = (
        ("single-event append (median):", "single_append_ms", "single_append_ratio"),
        ("100-event append (median):   ", "batch100_append_ms", "batch100_append_ratio"),
        ("read_all 1000-event page:    ", "read_all_page1000_ms", "read_all_ratio"),
        ("subscription batch of 1000:  ", "subscription_batch1000_ms", "subscription_ratio"),
    )
    for label, key, ratio in ratios:
        verdict = "meets" if results[ratio] >= TARGET_RATIO else "BELOW"
        print(
            f"{label} {pair(key)} | ratio {results[ratio]:.2f}"
            f" ({verdict} the target >= {TARGET_RATIO})"
        )
    print(f"  reference, raw behind a head: {pair('single_append_head_ms', 'store', 'raw_head')}"
          f" | store at {results['single_append_head_ratio']:.2f}x it (not the target)")
    notify = pair("notify_single_append_ms", "notify_on", "notify_off")
    print(f"NOTIFY, single append:        {notify}")
    conc = results["notify_concurrent_8x_appends_per_s"]
    on, off = conc["notify_on"], conc["notify_off"]
    print(f"NOTIFY, 8 writers:            on {on:.0f}/s | off {off:.0f}/s")
    grown = results["growth"]
    for size, figures in grown["by_size"].items():
        print(
            f"log {int(size):>9,} events:     append {figures['append_ms']:.3f} ms"
            f" | read_stream(20) {figures['read_stream20_ms']:.3f} ms"
            f" | read_all tail page(100) {figures['read_all_tail100_ms']:.3f} ms"
        )
    print(
        f"growth first->last size:      append {grown['append_growth']:.2f}x"
        f" | read_stream {grown['read_stream_growth']:.2f}x"
        f" | read_all tail {grown['read_all_tail_growth']:.2f}x"
    )
    print(f"server: {results['server']}")


def main() -> None:
    """Parse arguments, run against a fresh database, print (or dump) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="PostgreSQL server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="grow the log to 100k, not 1M")
    parser.add_argument("--ops", type=int, default=1000, help="operations per measurement")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--anchor-interval", type=float, default=0.0, help=(
        "take signed checkpoints this often (seconds) during the run; 0: none"))
    args = parser.parse_args()
    with postgres_server(args.url) as server_url, fresh_database(server_url) as url:
        results = run(url, args.quick, args.ops, args.anchor_interval)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)


if __name__ == "__main__":
    main()
