"""The checkpoint high-water mark's file: one mark per database, only ever raised (no database)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from events.integrity.anchor_witness import (
    AnchorWitness,
    AnchorWitnessError,
    HighWaterMark,
    PromotionLoss,
)


def _mark(seq: int) -> HighWaterMark:
    return HighWaterMark(seq, f"{seq:064x}", f"0/{seq:X}")


def test_a_mark_is_kept_per_database_and_only_raised(tmp_path: Path) -> None:
    # given a witness file with no mark yet
    witness = AnchorWitness(tmp_path / "deep" / "anchor.witness")
    assert witness.mark("1/5") is None
    # when marks are advanced for two databases
    assert witness.advance("1/5", _mark(3))
    assert witness.advance("2/5", _mark(9))
    # then each database keeps its own, and a lower or equal one never replaces it
    assert not witness.advance("1/5", _mark(2))
    assert not witness.advance("1/5", _mark(3))
    assert witness.mark("1/5") == _mark(3) and witness.mark("2/5") == _mark(9)
    assert witness.advance("1/5", _mark(4))
    assert AnchorWitness(witness.path).mark("1/5") == _mark(4)  # as another process reads it


def test_writers_at_once_leave_the_highest_mark(tmp_path: Path) -> None:
    witness = AnchorWitness(tmp_path / "anchor.witness")
    barrier = threading.Barrier(8)

    def advance(seq: int) -> None:
        barrier.wait()
        for n in range(seq, seq + 40, 8):
            AnchorWitness(witness.path).advance("db", _mark(n))

    threads = [threading.Thread(target=advance, args=(seq,)) for seq in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert witness.mark("db") == _mark(40)


def test_a_file_that_is_no_witness_is_a_named_error(tmp_path: Path) -> None:
    path = tmp_path / "anchor.witness"
    path.write_text('{"marks": {"db": {"seq": "x"}}}')
    with pytest.raises(AnchorWitnessError, match="not an anchor witness file"):
        AnchorWitness(path).mark("db")
    with pytest.raises(AnchorWitnessError, match="not an anchor witness file"):
        AnchorWitness(path).advance("db", _mark(1))


def test_an_unwritable_place_is_a_named_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(AnchorWitnessError, match="cannot be written"):
        AnchorWitness(blocker / "anchor.witness").advance("db", _mark(1))


def test_a_mark_from_before_timelines_reads_as_one_without_a_timeline(tmp_path: Path) -> None:
    path = tmp_path / "anchor.witness"
    path.write_text(json.dumps({"marks": {"db": {"seq": 2, "anchor_hash": "ab", "wal": "0/1"}}}))
    mark = AnchorWitness(path).mark("db")
    assert mark == HighWaterMark(2, "ab", "0/1", None)
    # and such a mark is never taken for one a promotion lost
    assert not mark.lost_by_promotion(7)


def test_only_a_later_timeline_means_a_promotion_lost_the_mark() -> None:
    mark = HighWaterMark(5, "ab", "0/9", timeline=2)
    assert mark.lost_by_promotion(3)
    assert not mark.lost_by_promotion(2)
    assert not mark.lost_by_promotion(1)
    assert not mark.lost_by_promotion(None)  # a standby: no timeline of its own


def test_lowering_replaces_the_mark_and_keeps_the_loss(tmp_path: Path) -> None:
    witness = AnchorWitness(tmp_path / "anchor.witness")
    lost = HighWaterMark(5, "ab", "0/9", timeline=1)
    witness.advance("db", lost)
    loss = PromotionLoss(lost, 2, 4, "2026-12-03T23:00:00+00:00")
    witness.lower("db", HighWaterMark(4, "cd", "0/A", timeline=2), loss)
    again = AnchorWitness(witness.path)  # as another process reads it
    assert again.mark("db") == HighWaterMark(4, "cd", "0/A", timeline=2)
    assert again.promotions("db") == [loss]
    assert again.promotions("other") == []
    # a lowering whose mark another process already moved does nothing
    witness.lower("db", None, PromotionLoss(lost, 3, None, "2026-12-03T23:01:00+00:00"))
    assert again.mark("db") == HighWaterMark(4, "cd", "0/A", timeline=2)
    assert len(again.promotions("db")) == 1
    # and raising continues from the lowered mark
    assert witness.advance("db", HighWaterMark(5, "ef", "0/B", timeline=2))
