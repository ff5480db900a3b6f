"""What tamper evidence costs off the append path: taking a checkpoint and auditing the log.

At each log size (10 thousand and 100 thousand events by default, filler streams of 10
events as in bench_store.py), the median of ``--repeat`` runs of:

* a first checkpoint over the whole log (every stream is a head: the worst case);
* an incremental checkpoint after 1000 new events over 100 streams (the steady state);
* ``audit_anchors`` over the whole log (what ``sagafleet verify`` adds).

    .venv/bin/python scripts/bench_anchor.py --url postgresql://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from typing import Any

import psycopg
from bench_databases import postgres_server
from bench_store import PAYLOAD, fill, fresh_database

from events import EventStore, NewEvent
from events.integrity.anchor_audit import audit_anchors
from events.integrity.anchors import AnchorKey, take_checkpoint


def _timed(action: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def measure(url: str, sizes: list[int], repeat: int) -> dict[str, Any]:
    """Checkpoint and audit times (median ms) at each log size."""
    key = AnchorKey(secrets.token_bytes(32))
    table: dict[str, Any] = {}
    with EventStore.connect(url, pool_size=4) as store, psycopg.connect(
        url, autocommit=True
    ) as raw:
        store.migrate()
        for size in sizes:
            fill(raw, size)
            full, incremental, audit = [], [], []
            for turn in range(repeat):
                raw.execute("TRUNCATE eventstore.anchors, eventstore.anchor_heads")
                took, first = _timed(lambda: take_checkpoint(store, key))
                full.append(took)
                for n in range(100):
                    store.append(f"bench-{size}-{turn}-{n}",
                                 [NewEvent("Bench", PAYLOAD) for _ in range(10)])
                took, _ = _timed(lambda: take_checkpoint(store, key))
                incremental.append(took)
                took, report = _timed(lambda: audit_anchors(store, key))
                audit.append(took)
                assert report.ok, report.findings
            table[str(size)] = {
                "events": report.events_anchored,
                "first_heads": len(first.heads),
                "first_checkpoint_ms": statistics.median(full) * 1000,
                "incremental_1000_events_ms": statistics.median(incremental) * 1000,
                "audit_ms": statistics.median(audit) * 1000,
            }
    return table


def main() -> None:
    """Parse arguments, measure on a fresh database, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="PostgreSQL server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--sizes", default="10000,100000", help="log sizes, comma-separated")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with postgres_server(args.url) as server_url, fresh_database(server_url) as url:
        print(json.dumps(measure(url, sizes, args.repeat), indent=2))


if __name__ == "__main__":
    main()
