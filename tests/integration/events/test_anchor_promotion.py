"""A checkpoint lost when an asynchronous standby is promoted is not tampering.

A real primary and a hot standby of it: the standby stops receiving WAL, the primary takes a
checkpoint the witness records, and the standby is promoted without it (a new timeline). The
checkpoint went with the old primary's unreplicated tail: verify names that loss and finds
nothing tampered, the next taker carries the chain on from what the new primary holds and
lowers the mark (recording the loss), and a table write that deletes a checkpoint on the
same timeline is still tampering."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from standby_cluster import StandbyPair, migrated_standby_pair, wait_for_replay

from events import EventStore, NewEvent
from events.integrity.anchor_audit import (
    AnchorProblem,
    audit_anchors,
    keep_high_water_mark,
)
from events.integrity.anchor_witness import AnchorWitness, database_identity, timeline
from events.integrity.anchors import AnchorKey, take_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = AnchorKey(b"k" * 32)
PROMOTE_TIMEOUT_S = 60.0
"""How long promotion may take (a ceiling, never a measurement)."""


@pytest.fixture
def pair() -> Iterator[StandbyPair]:
    """A primary and a hot standby of it, for one test (it promotes the standby)."""
    with migrated_standby_pair() as started:
        yield started


def _settle(store: EventStore) -> None:
    """Let the horizon pass everything appended (checkpoints cover only final events)."""
    time.sleep(0.05)


def _cut_replication(standby_url: str) -> None:
    """The standby stops streaming: what the primary writes from now on never reaches it."""
    with psycopg.connect(standby_url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
        conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + PROMOTE_TIMEOUT_S
        while conn.execute("SELECT count(*) FROM pg_stat_wal_receiver").fetchone() != (0,):
            assert time.monotonic() < deadline, "the standby kept streaming"
            time.sleep(0.05)


def _promote(standby_url: str) -> None:
    with psycopg.connect(standby_url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_promote(true, 60)").fetchone() == (True,)
        # Move the new timeline's WAL past anything the old primary wrote.
        conn.execute("CREATE TABLE IF NOT EXISTS public.wal_filler (n int)")
        conn.execute("SELECT pg_switch_wal()")


def test_a_checkpoint_lost_in_an_asynchronous_promotion_is_named_not_tampering(
    pair: StandbyPair, tmp_path: Path
) -> None:
    witness = AnchorWitness(tmp_path / "anchor.witness")
    # given a checkpoint both servers hold, on timeline 1
    with EventStore.connect(pair.primary) as primary:
        primary.append("s-1", [NewEvent("E", {"n": 1})])
        _settle(primary)
        first = take_checkpoint(primary, KEY, witness)
        assert first is not None
        with primary.connection() as conn:
            identity, line = database_identity(conn), timeline(conn)
        assert line == 1
        wait_for_replay(pair.primary, pair.standby)
        # and a standby cut off from the primary, which then takes one more checkpoint
        _cut_replication(pair.standby)
        primary.append("s-1", [NewEvent("E", {"n": 2})], expected_version=1)
        _settle(primary)
        lost = take_checkpoint(primary, KEY, witness)
        assert lost is not None
    marked = witness.mark(identity)
    assert marked is not None and (marked.seq, marked.timeline) == (lost.seq, 1)

    # when the standby is promoted without it
    _promote(pair.standby)
    with EventStore.connect(pair.standby) as promoted:
        with promoted.connection() as conn:
            assert database_identity(conn) == identity
            assert timeline(conn) == 2

        # then verify names the loss, and nothing is tampering
        report = audit_anchors(promoted, KEY, witness=witness)
        assert report.findings == []
        assert report.lost_in_promotion == marked
        assert report.last_seq == first.seq

        # and the next taker carries the chain on from the new primary's checkpoints,
        # lowering the mark and recording the loss
        promoted.append("s-1", [NewEvent("E", {"n": 2, "again": True})], expected_version=1)
        _settle(promoted)
        again = take_checkpoint(promoted, KEY, witness)
        assert again is not None and again.seq == lost.seq and again.prev_hash == first.anchor_hash
        assert again.anchor_hash != lost.anchor_hash
        now = witness.mark(identity)
        assert now is not None and (now.seq, now.anchor_hash, now.timeline) == (
            again.seq, again.anchor_hash, 2)
        [loss] = witness.promotions(identity)
        assert (loss.lost, loss.timeline, loss.lowered_to) == (marked, 2, again.seq)

        # and verify is clean afterwards, still showing the recorded loss
        after = audit_anchors(promoted, KEY, witness=witness)
        assert after.ok and after.lost_in_promotion is None
        assert after.promotion_losses == [loss]

        # but a checkpoint deleted by a table write on this timeline is tampering, as before
        with promoted.connection() as conn:
            conn.execute("DELETE FROM eventstore.anchor_heads WHERE seq = %s", (again.seq,))
            conn.execute("DELETE FROM eventstore.anchors WHERE seq = %s", (again.seq,))
        tampered = audit_anchors(promoted, KEY, witness=witness)
        assert AnchorProblem.BELOW_HIGH_WATER_MARK in {f.problem for f in tampered.findings}
        assert tampered.lost_in_promotion is None


def test_a_clean_verify_after_a_promotion_lowers_the_mark_itself(
    pair: StandbyPair, tmp_path: Path
) -> None:
    witness = AnchorWitness(tmp_path / "anchor.witness")
    with EventStore.connect(pair.primary) as primary:
        primary.append("s-2", [NewEvent("E", {})])
        _settle(primary)
        first = take_checkpoint(primary, KEY, witness)
        assert first is not None
        wait_for_replay(pair.primary, pair.standby)
        _cut_replication(pair.standby)
        primary.append("s-2", [NewEvent("E", {})], expected_version=1)
        _settle(primary)
        assert take_checkpoint(primary, KEY, witness) is not None
        with primary.connection() as conn:
            identity = database_identity(conn)
    _promote(pair.standby)
    with EventStore.connect(pair.standby) as promoted:
        report = audit_anchors(promoted, KEY, witness=witness)
        assert report.ok and report.lost_in_promotion is not None
        # when the verifier keeps its own record (as `sagafleet verify` does after a check)
        assert keep_high_water_mark(witness, report)
        mark = witness.mark(identity)
        assert mark is not None and (mark.seq, mark.anchor_hash, mark.timeline) == (
            first.seq, first.anchor_hash, 2)
        assert [p.lowered_to for p in witness.promotions(identity)] == [first.seq]
        assert audit_anchors(promoted, KEY, witness=witness).lost_in_promotion is None
