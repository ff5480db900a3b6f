"""Writing trip saga events straight into the log (no broker) for projection tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from events import UnitOfWork
from events.saga_log.postgres import PostgresSagaLog
from saga_core import operation_key, payload_hash
from saga_core.contracts import ErrorClass, Receipt, SagaStatus, StepKind
from saga_core.engine.events import (
    ApprovalRequested,
    CompensationStarted,
    Evidence,
    ManualInterventionRequired,
    SagaEvent,
    SagaFinished,
    SagaStarted,
    StepFailed,
    StepScheduled,
    StepStarted,
    StepSucceeded,
)
from sagafleet.example_sagas import trip_definition

T0 = datetime(2025, 1, 1, tzinfo=UTC)
SECRET_CARD = "tok_SECRET_4242"
TRIP_INPUT: dict[str, Any] = {
    "customer_email": "ada@example.com",
    "flight_id": "FL-1",
    "hotel_id": "HT-1",
    "nights": 2,
    "amount": 50000,
    "currency": "EUR",
    "card_token": SECRET_CARD,
}


class TripScript:
    """Builds one trip saga's events in order, with a deterministic clock."""

    def __init__(self, saga_id: str | None = None, tenant: str = "default") -> None:
        self.saga_id = saga_id or str(uuid.uuid4())
        self.tenant = tenant
        self.definition = trip_definition()
        self.t = T0
        self.events: list[SagaEvent] = []

    def _at(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t

    def key(self, step: str, kind: StepKind = StepKind.FORWARD) -> str:
        """The operation key of a step's run."""
        return operation_key(self.saga_id, step, kind, 1)

    def start(self) -> TripScript:
        d = self.definition
        self.events.append(SagaStarted(
            at=self._at(), saga_id=self.saga_id, tenant=self.tenant, definition_name=d.name,
            definition_version=d.version, definition_hash=d.content_hash(), input=TRIP_INPUT,
            input_hash=payload_hash(TRIP_INPUT), actor="agent-7", retry_budget=d.retry_budget))
        return self

    def succeed(self, step: str, kind: StepKind = StepKind.FORWARD, *, attempt: int = 1,
                resource: str | None = None) -> TripScript:
        at = self._at()
        key = self.key(step, kind)
        self.events += [
            StepScheduled(at=at, step_id=step, kind=kind, attempt=attempt, not_before=at,
                          reason="due"),
            StepStarted(at=at, step_id=step, kind=kind, attempt=attempt, operation_key=key,
                        request_hash="h", worker_id="w1", lease_expires_at=at + timedelta(30)),
            StepSucceeded(at=self._at(), step_id=step, kind=kind, attempt=attempt,
                          operation_key=key,
                          receipt=Receipt(resource_id=resource or f"{step}-r", version=1,
                                          fields={"amount": 50000, "currency": "EUR",
                                                  "to": "ada@example.com"})),
        ]
        return self

    def duplicate_success(self, step: str, resource: str) -> TripScript:
        """A second StepSucceeded for the same key with another receipt (a duplicate effect)."""
        self.events.append(StepSucceeded(
            at=self._at(), step_id=step, kind=StepKind.FORWARD, attempt=1,
            operation_key=self.key(step), receipt=Receipt(resource_id=resource, version=1)))
        return self

    def fail(self, step: str, error: ErrorClass = ErrorClass.BUSINESS_REJECTION) -> TripScript:
        at = self._at()
        self.events += [
            StepScheduled(at=at, step_id=step, kind=StepKind.FORWARD, attempt=1, not_before=at,
                          reason="due"),
            StepStarted(at=at, step_id=step, kind=StepKind.FORWARD, attempt=1,
                        operation_key=self.key(step), request_hash="h", worker_id="w1",
                        lease_expires_at=at + timedelta(30)),
            StepFailed(at=self._at(), step_id=step, kind=StepKind.FORWARD, attempt=1,
                       operation_key=self.key(step), error_class=error,
                       message=f"declined card {SECRET_CARD}"),
        ]
        return self

    def compensate(self, *steps: str) -> TripScript:
        self.events.append(CompensationStarted(at=self._at(), reason="payment declined",
                                               failed_step="capture_payment"))
        for step in steps:
            self.succeed(step, StepKind.COMPENSATION, resource=f"{step}-undo")
        return self

    def escalate(self, step: str = "capture_payment") -> TripScript:
        evidence = Evidence(
            intended_action=f"refund {step}", affected_resource=f"{step}-r",
            forward_receipt=Receipt(resource_id=f"{step}-r", version=1),
            reason="refund keeps failing", expected_result="the card is refunded",
            residual_risk="customer charged without a trip", deadline=self.t + timedelta(hours=4),
            alternatives=["retry_step", "mark_compensated"],
            details={"args": {"card_token": SECRET_CARD}})
        self.events.append(ManualInterventionRequired(
            at=self._at(), reason="compensation of capture_payment failed 3 times",
            step_id=step, kind=StepKind.COMPENSATION, evidence=evidence))
        return self

    def ask_approval(self, step: str = "capture_payment") -> TripScript:
        at = self._at()
        self.events.append(ApprovalRequested(
            at=at, step_id=step, kind=StepKind.FORWARD, action_hash="a" * 64,
            scope="payments.capture", expires_at=at + timedelta(hours=1),
            evidence=Evidence(intended_action="capture 500.00 EUR", reason="above limit",
                              alternatives=["deny"])))
        return self

    def finish(self, state: SagaStatus) -> TripScript:
        self.events.append(SagaFinished(at=self._at(), state=state))
        return self

    def completed(self) -> TripScript:
        return (self.start().succeed("hold_flight").succeed("hold_hotel")
                .succeed("capture_payment").succeed("send_itinerary")
                .finish(SagaStatus.COMPLETED))

    def compensated(self) -> TripScript:
        return (self.start().succeed("hold_flight").succeed("hold_hotel")
                .fail("capture_payment").compensate("hold_flight", "hold_hotel")
                .finish(SagaStatus.COMPENSATED))

    def write(self, repo: PostgresSagaLog, *, chunk: int | None = None,
              unit: UnitOfWork | None = None) -> None:
        """Append the events (all at once, or in chunks of ``chunk``) at their versions."""
        size = chunk or len(self.events)
        version = repo.store.stream_version(f"saga-{self.saga_id}")
        pending = self.events[version:]
        for i in range(0, len(pending), size):
            part = pending[i:i + size]
            repo.append(self.saga_id, self.tenant, part, version, actor="agent-7", unit=unit)
            version += len(part)
