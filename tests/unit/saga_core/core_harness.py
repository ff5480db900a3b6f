"""A tiny in-memory saga log for scenario tests: append events, fold, decide, record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from saga_core import (
    Decision,
    ErrorClass,
    Receipt,
    ReconciliationResult,
    SagaDefinition,
    SagaEvent,
    SagaStarted,
    SagaState,
    StepFailed,
    StepKind,
    StepOutcomeUnknown,
    StepStarted,
    StepSucceeded,
    decide,
    fold,
    payload_hash,
    resolve_command,
)
from saga_core.access.roles import Principal, PrincipalKind

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
F, C = StepKind.FORWARD, StepKind.COMPENSATION


def person(name: str, *roles: str, tenant: str = "t1") -> Principal:
    """A proven person of ``tenant`` (the harness saga's by default); roles default to
    approver."""
    return Principal(tenant, name, PrincipalKind.PERSON, frozenset(roles or ("approver",)))


def trip_input(**overrides: Any) -> dict[str, Any]:
    """A valid trip input under the approval limit."""
    data: dict[str, Any] = {
        "customer_email": "ada@example.com",
        "flight_id": "LH123",
        "hotel_id": "H-9",
        "nights": 2,
        "amount": 45000,
        "currency": "EUR",
        "card_token": "tok_secret_4242",
    }
    data.update(overrides)
    return data


RECEIPTS: dict[str, Receipt] = {
    "hold_flight": Receipt(
        resource_id="FH-1", version=3, fields={"flight_id": "LH123", "seat": "12A", "price": 30000}
    ),
    "hold_hotel": Receipt(
        resource_id="HH-1", version=1, fields={"hotel_id": "H-9", "nights": 2, "price": 15000}
    ),
    "capture_payment": Receipt(resource_id="CP-1", fields={"amount": 45000, "currency": "EUR"}),
    "send_itinerary": Receipt(
        resource_id="EM-1", fields={"to": "ada@example.com", "message_id": "m1"}
    ),
}


def receipt_for(step_id: str, kind: StepKind = F) -> Receipt:
    """A plausible receipt for a step (generic for unknown steps and compensations)."""
    if kind is F and step_id in RECEIPTS:
        return RECEIPTS[step_id]
    return Receipt(resource_id=f"{kind}-{step_id}", version=1, fields={"to": "x"})


class Saga:
    """One saga's log in memory, with helpers that play the worker's part."""

    def __init__(
        self,
        definition: SagaDefinition,
        data: dict[str, Any] | None = None,
        saga_id: str = "saga-1",
        retry_budget: int | None = None,
    ) -> None:
        self.definition = definition
        self.now = T0
        self.events: list[SagaEvent] = []
        self._state: SagaState | None = None
        data = data if data is not None else {}
        self.append(
            SagaStarted(
                at=self.now,
                saga_id=saga_id,
                tenant="t1",
                definition_name=definition.name,
                definition_version=definition.version,
                definition_hash=definition.content_hash(),
                input=data,
                input_hash=payload_hash(data),
                actor="test",
                retry_budget=definition.retry_budget if retry_budget is None else retry_budget,
            )
        )

    # -- log -----------------------------------------------------------------------------
    @property
    def state(self) -> SagaState:
        if self._state is None:
            self._state = fold(self.definition, self.events)
        return self._state

    def append(self, event: SagaEvent) -> None:
        self.events.append(event)
        self._state = None

    def tick(self, seconds: float) -> None:
        self.now = self.now + timedelta(seconds=seconds)

    def decide(self) -> list[Decision]:
        return decide(self.state, self.now)

    def record(self) -> list[Decision]:
        """Decide once and append every decision's event."""
        decisions = self.decide()
        for decision in decisions:
            self.append(decision.to_event(at=self.now))
        return decisions

    def settle(self, rounds: int = 20) -> list[Decision]:
        """Decide and record until nothing new is decided; returns everything decided."""
        out: list[Decision] = []
        for _ in range(rounds):
            batch = self.record()
            if not batch:
                return out
            out += batch
        raise AssertionError(f"decide did not settle: {out[-5:]}")

    # -- the worker's part ------------------------------------------------------------------
    def claim(self, step_id: str, kind: StepKind = F, lease_s: float = 30) -> StepStarted:
        run = self.state.run(step_id, kind)
        command = resolve_command(self.state, step_id, kind)
        timeout_s = self.state.definition.step_timeout_s(step_id, kind)  # as a worker does
        event = StepStarted(
            at=self.now,
            step_id=step_id,
            kind=kind,
            attempt=run.attempt,
            operation_key=command.operation_key,
            request_hash=command.request_hash,
            worker_id="w1",
            lease_expires_at=self.now + timedelta(seconds=lease_s),
            timeout_at=self.now + timedelta(seconds=timeout_s) if timeout_s else None,
        )
        self.append(event)
        return event

    def succeed(self, step_id: str, kind: StepKind = F, receipt: Receipt | None = None) -> None:
        run = self.state.run(step_id, kind)
        self.append(
            StepSucceeded(
                at=self.now,
                step_id=step_id,
                kind=kind,
                attempt=run.attempt,
                operation_key=run.operation_key,
                receipt=receipt or receipt_for(step_id, kind),
            )
        )

    def fail(self, step_id: str, error: ErrorClass, kind: StepKind = F, msg: str = "") -> None:
        run = self.state.run(step_id, kind)
        self.append(
            StepFailed(
                at=self.now,
                step_id=step_id,
                kind=kind,
                attempt=run.attempt,
                operation_key=run.operation_key,
                error_class=error,
                message=msg or str(error),
            )
        )

    def unknown(self, step_id: str, kind: StepKind = F) -> None:
        run = self.state.run(step_id, kind)
        self.append(
            StepOutcomeUnknown(
                at=self.now,
                step_id=step_id,
                kind=kind,
                attempt=run.attempt,
                operation_key=run.operation_key,
                reason="timeout",
            )
        )

    def lookup(
        self, step_id: str, result: str, kind: StepKind = F, receipt: Receipt | None = None
    ) -> None:
        run = self.state.run(step_id, kind)
        self.append(
            ReconciliationResult(
                at=self.now,
                step_id=step_id,
                kind=kind,
                attempt=run.attempt,
                operation_key=run.operation_key,
                result=result,  # type: ignore[arg-type]
                receipt=receipt if result == "found" else None,
            )
        )

    def run_ok(self, step_id: str, kind: StepKind = F) -> None:
        """Claim and succeed."""
        self.claim(step_id, kind)
        self.succeed(step_id, kind)


def kinds(decisions: list[Decision]) -> list[str]:
    """Decision class names, for readable assertions."""
    return [type(d).__name__ for d in decisions]
