"""What the queue page says about an entry, derived from its read-model rows (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projections import QueueRow, StepRunRow
from sagafleet.console.pages.queue_items import queue_item
from sagafleet.example_sagas import trip_definition

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _row(**changes: Any) -> QueueRow:
    fields: dict[str, Any] = {
        "saga_id": "s-1", "entry": "approval", "step_id": "capture_payment",
        "kind": "forward", "tenant": "acme", "definition_name": "trip",
        "reason": "approval policy applies", "action_hash": "h" * 64, "scope": "the quote",
        "evidence": {"intended_action": "forward capture_payment: payments.capture@1",
                     "expected_result": "capture_payment done by payments.capture@1",
                     "alternatives": ["approve", "deny"],
                     "details": {"args": {"amount": 250000, "card_token": "<redacted>"},
                                 "gate": {"role": "approver", "four_eyes": True,
                                          "risk_class": "money", "amount_arg": "amount",
                                          "amount": 250000,
                                          "reasons": ["amount is above 100000"]}}},
        "deadline": NOW + timedelta(minutes=5), "requested_at": NOW - timedelta(minutes=55)}
    return QueueRow(**(fields | changes))


def _step(step_id: str, status: str) -> StepRunRow:
    return StepRunRow(
        saga_id="s-1", step_id=step_id, kind="forward", tool="t", tool_version=1,
        semantics="compensable", status=status, attempts=1, operation_key="k",
        receipt={"resource_id": f"r-{step_id}"} if status == "succeeded" else None,
        error_class=None, error_message="", worker_id=None, lease_expires_at=None, starts=1,
        successes=1, distinct_receipts=1, failures=0, ambiguous=0, reconciliations_found=0,
        reconciliations_absent=0, reconciliations_unknown=0, first_started_at=None,
        succeeded_at=None, changed_at=None, started_without_approval=False)


def test_an_approval_before_the_pivot_says_a_denial_compensates() -> None:
    steps = [_step("hold_flight", "succeeded"), _step("hold_hotel", "succeeded")]
    item = queue_item(_row(), None, steps, trip_definition(), NOW)
    assert item.is_approval and item.urgent  # five minutes left
    assert item.gate is not None and item.gate.role == "approver" and item.gate.four_eyes
    assert item.gate.amount == 250000 and item.gate.reasons == ("amount is above 100000",)
    assert item.arguments == {"amount": 250000, "card_token": "<redacted>"}
    assert "compensates" in item.on_deny and "hold_flight, hold_hotel" in item.on_deny
    assert "15 minutes" in item.on_approve  # the trip's grant lifetime
    assert [r.step_id for r in item.receipts] == ["hold_flight", "hold_hotel"]
    assert "scope: the quote" in item.business_rules
    assert any("above 100000" in rule for rule in item.business_rules)


def test_after_the_pivot_a_denial_pauses_instead() -> None:
    row = _row(step_id="send_itinerary")
    steps = [_step("send_itinerary", "succeeded")]
    item = queue_item(row, None, steps, trip_definition(), NOW)
    assert "past its pivot" in item.on_deny
    assert "pauses for manual intervention" in item.on_deny


def test_a_manual_intervention_offers_the_typed_actions_that_fit() -> None:
    row = _row(entry="manual_intervention", action_hash=None, scope=None,
               deadline=NOW + timedelta(hours=3),
               evidence={"intended_action": "forward capture_payment: payments.capture@1",
                         "alternatives": ["retry_step", "skip", "cancel"], "details": {}})
    item = queue_item(row, None, [], trip_definition(), NOW)
    assert not item.is_approval and not item.urgent and item.gate is None
    assert [c.action for c in item.choices] == ["retry_step", "skip"]
    assert item.cancellable
