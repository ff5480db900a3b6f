"""The pure fold behind every read model: counters, queue rows and masking."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "projections"))

from projection_support import SECRET_CARD, TripScript  # noqa: E402

from projections.masking import MASK, mask  # noqa: E402
from projections.record import SagaRecord, replay  # noqa: E402
from projections.rows import rows_of  # noqa: E402
from saga_core import fold  # noqa: E402


def record_of(script: TripScript) -> SagaRecord:
    record = replay(script.definition, [(e, n) for n, e in enumerate(script.events, start=1)])
    assert record is not None
    return record


def test_a_second_success_with_another_receipt_counts_as_a_duplicate_effect() -> None:
    # given a step that succeeded twice under one operation key with two receipts
    script = TripScript().start().succeed("hold_flight").duplicate_success("hold_flight", "x")

    # when its rows are derived
    steps = {s.step_id: s for s in rows_of(record_of(script)).steps}

    # then the counters show the duplicate
    assert (steps["hold_flight"].successes, steps["hold_flight"].distinct_receipts) == (2, 2)
    assert steps["hold_hotel"].successes == 0


def test_an_escalation_becomes_a_queue_row_with_masked_evidence() -> None:
    # given an escalated saga whose evidence mentions the secret card token
    script = TripScript().start().succeed("hold_flight").escalate()

    # when its rows are derived
    rows = rows_of(record_of(script))

    # then the queue holds one manual intervention and no secret anywhere
    (entry,) = rows.queue
    assert entry.entry == "manual_intervention" and entry.step_id == "capture_payment"
    assert entry.evidence["details"]["args"]["card_token"] == MASK
    assert SECRET_CARD not in repr(rows)
    assert rows.summary.state == "MANUAL_INTERVENTION" and rows.summary.escalations == 1


def test_a_pending_approval_is_queued_until_answered() -> None:
    script = TripScript().start().succeed("hold_flight").succeed("hold_hotel").ask_approval()
    (entry,) = rows_of(record_of(script)).queue
    assert (entry.entry, entry.action_hash) == ("approval", "a" * 64)


def test_the_summary_agrees_with_saga_cores_fold() -> None:
    script = TripScript().compensated()
    summary = rows_of(record_of(script)).summary
    assert summary.state == str(fold(script.definition, script.events).status)
    assert summary.stream_version == len(script.events)


def test_masking_reaches_nested_text_but_not_short_fragments() -> None:
    secrets = ("tok_SECRET_4242", "ab")
    value = {"a": ["declined tok_SECRET_4242 today"], "b": "ab", "c": "abc"}
    assert mask(value, secrets) == {"a": [f"declined {MASK} today"], "b": MASK, "c": "abc"}
