"""Where a single-event append's time goes beyond its statement: a ladder of partial appends.

Each rung is timed in turns against the raw INSERT of ``bench_store.py`` (its own turns,
same run), so each ratio reads like that benchmark's single-append ratio:

* ``statement``: the store's own single-event statement (the chained insert behind the
  stream head), its parameters built by hand, on a dedicated connection;
* ``+pool``: the same through the store's connection pool;
* ``+prepare``: the event validated and normalised as the store does (``new_events``,
  ``prepare_events``), on the dedicated connection;
* ``+both``: prepared and through the pool;
* ``store``: ``EventStore.append`` (the above, plus its error translation and its result).

A diagnostic for issue 21's single-append target: what is the statement's, what is the
client's. It reaches into the store's internals (the statement text, the pool) on purpose,
and its hand-built rows chain over other text than the store hashes (a throwaway database,
dropped at the end: nothing verifies them).

    python scripts/append_ladder.py --url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from bench_databases import drop_database, new_database
from bench_store import PAYLOAD, RAW_TABLE, Appender, RawInserter, interleaved

from events import EventStore, NewEvent
from events.eventstore.appending import CHAINED_INSERTS, ChainedInsert, Rows, _cursor
from events.eventstore.hashing import chain_hash, recorded_at_text
from events.eventstore.model import GENESIS_HASH, utc_now
from events.eventstore.prepare import prepare_events
from events.eventstore.rules import new_events


class Rung:
    """Single-event appends to 64 streams by the store's own statement, the parts of the
    store's path around it switched on or off."""

    def __init__(self, store: EventStore, own: psycopg.Connection[Any], prefix: str, *,
                 pool: bool, prepare: bool) -> None:
        self.store, self.own, self.pool, self.prepare = store, own, pool, prepare
        self.heads = {f"{prefix}-{n}": (0, GENESIS_HASH) for n in range(64)}
        self.names, self.turn = list(self.heads), 0

    def __call__(self) -> None:
        stream = self.names[self.turn % len(self.names)]
        self.turn += 1
        version, tip = self.heads[stream]
        if self.prepare:
            envelopes = new_events(self.store.registry, [NewEvent("Bench", PAYLOAD)])
            prepared = prepare_events(stream, envelopes, 1 << 20, utc_now())[0]
            data, at = prepared.data_json, prepared.recorded_at_text
        else:
            data = json.dumps(PAYLOAD, separators=(",", ":"), sort_keys=True)
            at = recorded_at_text(utc_now())
        last = chain_hash(tip, f"{stream}{version + 1}{data}")
        params = {"stream": stream, "expected": version, "tip": tip, "version": version + 1,
                  "last_hash": last, "id": uuid.uuid4(), "type": "Bench", "sv": 1,
                  "tenant": None, "data": data, "meta": "{}", "at": at}
        statement = CHAINED_INSERTS[
            ChainedInsert(new_stream=version == 0, rows=Rows.ONE, wake=True, due=False)
        ]
        if self.pool:
            with self.store.connection() as conn:
                rows = _cursor(conn).execute(statement, params).fetchall()
        else:
            rows = _cursor(self.own).execute(statement, params).fetchall()
        if not rows:
            raise RuntimeError(f"{stream} did not move from version {version}")
        self.heads[stream] = (version + 1, last)


def main() -> None:
    """Time each rung against the raw INSERT, in turns; print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="PostgreSQL server URL")
    parser.add_argument("--ops", type=int, default=800, help="appends per rung")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    url = new_database(args.url, "append_ladder")
    try:
        with EventStore.connect(url, pool_size=16) as store, \
                psycopg.connect(url, autocommit=True) as raw, \
                psycopg.connect(url, autocommit=True) as own:
            store.migrate()
            raw.execute(RAW_TABLE.encode())
            for _ in range(args.rounds):
                tag = str(time.time())
                rungs: list[tuple[str, Callable[[], object]]] = [
                    (name, Rung(store, own, f"{name}-{tag}", pool=pool, prepare=prepare))
                    for name, pool, prepare in (("statement", False, False),
                                                ("+pool", True, False),
                                                ("+prepare", False, True),
                                                ("+both", True, True))
                ]
                rungs.append(("store", Appender(store, f"store-{tag}")))
                for name, op in rungs:
                    times = interleaved({"op": op, "raw": RawInserter(raw, f"raw-{name}-{tag}")},
                                        args.ops)
                    print(f"{name:>10}: {times['op']:.3f} ms | raw {times['raw']:.3f} ms"
                          f" | ratio {times['raw'] / times['op']:.2f}", flush=True)
    finally:
        drop_database(args.url, url)


if __name__ == "__main__":
    main()
