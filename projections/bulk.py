"""The bulk phase of a rebuild: fold the log up to a horizon in parallel, one process per part.

A rebuild folds every saga of the log, in Python, and that is CPU-bound on one core while
the database idles. So before the checkpointed runner takes over, the sagas are split into
``parts`` by a hash of their stream id; each part runs in its own process, reads its
streams in stream-version order inside one snapshot and writes their rows into the new
table set. Correctness rests on two facts:

* the horizon ``H`` (``EventStore.horizon``) is the last event whose writer's xid is below
  the snapshot xmin, the rule gap-safe reading uses: the events up to ``H`` are final;
* every part's snapshot is taken after ``H``, and it folds each saga's whole stream as
  committed then, so every event up to ``H`` is folded, and the runner that resumes from
  ``H`` sees the later ones again only as duplicates, which its version gate skips.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Final

from events.saga_log.streams import STREAM_PREFIX, CorruptSagaStream
from projections.context import ProjectionContext
from projections.record import SagaRecord, fold_event
from projections.rows import SagaRows, rows_of
from projections.store import TableSetWriter

WRITE_EVERY: Final = 1000
"""Sagas per write transaction in a part."""


def fold_parts(url: str, version: int, parts: int) -> int:
    """Fold every saga stream into table set ``version`` with ``parts`` processes.

    Call it after taking the horizon (``EventStore.horizon``); returns the number of events
    folded. A failing part raises here; the rows already written belong to a set that is
    still ``building``, which the next rebuild drops.
    """
    if parts == 1:
        return fold_part(url, version, 0, 1)
    # spawn, not fork: the caller holds pools, locks and threads a fork would copy.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=parts - 1, mp_context=context) as pool:
        futures = [pool.submit(fold_part, url, version, part, parts) for part in range(1, parts)]
        # This process folds part 0 meanwhile: one interpreter fewer to start.
        folded = fold_part(url, version, 0, parts)
        return folded + sum(future.result() for future in futures)


def fold_part(url: str, version: int, part: int, parts: int) -> int:
    """Fold the saga streams of one part and write their rows; return the events folded."""
    folded = 0
    with ProjectionContext.connect(url, pool_size=2) as ctx, ctx.connection() as writer:
        out = TableSetWriter(version)
        pending: list[SagaRows] = []
        for record, events in _records(ctx, part, parts):
            folded += events
            pending.append(rows_of(record))
            if len(pending) >= WRITE_EVERY:
                with writer.transaction():
                    out.insert_new(writer, pending)
                pending.clear()
        if pending:
            with writer.transaction():
                out.insert_new(writer, pending)
    return folded


def _records(ctx: ProjectionContext, part: int, parts: int) -> Iterator[tuple[SagaRecord, int]]:
    """Each saga of the part folded from its whole stream, and how many events that took."""
    registry = ctx.store.registry
    if registry is None:  # ProjectionContext.connect always gives the saga registry
        raise CorruptSagaStream("a bulk fold needs a store with saga_registry()")
    record: SagaRecord | None = None
    stream, count = "", 0
    for recorded in ctx.store.scan_streams(STREAM_PREFIX, part=part, parts=parts):
        if recorded.stream_id != stream:
            if record is not None:
                yield record, count
            record, stream, count = None, recorded.stream_id, 0
        if recorded.stream_version != count + 1:
            raise CorruptSagaStream(
                f"{stream} jumps from version {count} to {recorded.stream_version}"
            )
        record = fold_event(ctx.definitions, registry, record, recorded)
        count += 1
    if record is not None:
        yield record, count
