"""The integrity checks ``verify`` and ``audit`` share: everything a decision reads, checked alike.

For one stream (:func:`check_stream`): every event against its hash with the layout of its own
hash version, its ``tenant_id`` column against the tenant its metadata names, the chain of
predecessors, the head row appends continue from, and the stream's snapshot re-folded
(:mod:`events.integrity.snapshot_audit`). For the log (:func:`check_anchors`): the checkpoints,
their
signatures and the high-water mark kept outside the database, over the whole log
(``verify``) or what bears on one stream (``audit``). Both commands call these two functions,
so a stream one of them flags, the other flags too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from events import ChainBreak, RecordedEvent, verify_chain
from events.integrity.anchor_audit import AnchorAge, AnchorReport, audit_anchors
from events.integrity.anchor_witness import AnchorWitness
from events.integrity.anchors import AnchorKey
from events.integrity.chain import with_head
from events.integrity.snapshot_audit import snapshot_finding
from events.saga_log.snapshots import StoredSnapshot
from events.saga_log.streams import SagaCodec
from projections.context import ProjectionContext


@dataclass(frozen=True)
class IntegrityChecks:
    """What the log is held to beyond each stream's own chain: the key that signed its
    checkpoints, a checkpoint kept by hand (``expect``, seq and hash), the witness file of
    the high-water mark, and (with a key) how old a final event may get unanchored."""

    key: AnchorKey | None = None
    expect: tuple[int, str] | None = None
    witness: AnchorWitness | None = None
    age: AnchorAge | None = None


@dataclass(frozen=True)
class StreamIntegrity:
    """One stream checked: the first event (or the head) that does not verify, and its
    snapshot's problem, if any."""

    stream_id: str
    events: int
    chain_break: ChainBreak | None
    snapshot_version: int | None = None
    snapshot_problem: str | None = None

    @property
    def ok(self) -> bool:
        """The chain, the head and the snapshot all check out."""
        return self.chain_break is None and self.snapshot_problem is None


def saga_codec(ctx: ProjectionContext) -> SagaCodec:
    """The fold a snapshot is compared with: the saga events of the context's registry."""
    if ctx.store.registry is None:
        raise ValueError("an integrity check needs a store opened with saga_registry()")
    return SagaCodec(ctx.store.registry, ctx.definitions)


def check_stream(
    ctx: ProjectionContext,
    stream_id: str,
    records: Sequence[RecordedEvent],
    snapshot: StoredSnapshot | None,
    codec: SagaCodec,
) -> StreamIntegrity:
    """Check one stream's events (read whole, in version order), its head row and its
    snapshot (None: it has none)."""
    chain = with_head(verify_chain(records, stream_id), ctx.store.stream_head(stream_id))
    problem = snapshot_finding(codec, snapshot, records) if snapshot is not None else None
    return StreamIntegrity(stream_id, len(records), chain.first_break,
                           snapshot.version if snapshot is not None else None, problem)


def check_anchors(
    ctx: ProjectionContext, checks: IntegrityChecks, stream_id: str | None = None
) -> AnchorReport:
    """The log against its checkpoints: all of it, or what bears on ``stream_id``."""
    return audit_anchors(ctx.store, checks.key, expect=checks.expect, witness=checks.witness,
                         age=checks.age, stream_id=stream_id)
