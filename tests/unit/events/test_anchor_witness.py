"""The checkpoint high-water mark's file: one mark per database, only ever raised (no database)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from events.integrity.anchor_witness import AnchorWitness, AnchorWitnessError, HighWaterMark


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
