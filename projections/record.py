"""The pure per-saga accumulator every read model is derived from.

``SagaState`` (saga_core's fold) says where a saga stands; a :class:`SagaRecord` adds what
the read models need beyond it, counted from the events themselves: attempts, successes
and distinct receipts per operation key (duplicate effects), ambiguous outcomes,
reconciliation results, latencies, the evidence of the latest escalation and approval
requests, and the last error with the operation it was about (:func:`last_error_recovered`).
The runner and ``verify`` use the same functions, so "the read model equals a fresh fold of
the log" is checked against exactly one definition of the fold.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from events import EventRegistry, RecordedEvent, ScannedEvent
from events.definition_store.postgres import DefinitionStore
from events.saga_log.streams import CorruptSagaStream
from projections.masking import secret_values
from saga_core import evolve
from saga_core.canonical_json import canonical_json
from saga_core.contracts import ErrorClass, Receipt, StepKind
from saga_core.definitions.definition import SagaDefinition
from saga_core.engine.events import (
    ApprovalRequested,
    CompensationStarted,
    Evidence,
    ManualInterventionRequired,
    PlanRevised,
    ReconciliationResult,
    SagaEvent,
    SagaFinished,
    SagaStarted,
    StepEvent,
    StepFailed,
    StepOutcomeUnknown,
    StepStarted,
    StepSucceeded,
)
from saga_core.engine.state import SagaState, error_recovered, replace

RunKey = tuple[str, StepKind]


# saga_core's cheap replace for frozen, slot-less records (a rebuild folds millions of events).
_with = replace


@dataclass(frozen=True)
class OperationTally:
    """Counters of one operation, taken from its events (not from the folded state)."""

    starts: int = 0
    successes: int = 0
    receipts: frozenset[Hashable] = frozenset()
    failures: int = 0
    ambiguous: int = 0
    reconciliations_found: int = 0
    reconciliations_absent: int = 0
    reconciliations_unknown: int = 0
    first_started_at: datetime | None = None
    succeeded_at: datetime | None = None
    started_without_approval: bool = False


NO_TALLY = OperationTally()
"""The tally of an operation no event has touched yet (shared: tallies are immutable)."""


@dataclass(frozen=True)
class SagaRecord:
    """A saga's folded state plus the counters and evidence the read models show."""

    saga_id: str
    definition: SagaDefinition
    state: SagaState
    stream_version: int
    started_at: datetime
    updated_at: datetime
    secrets: tuple[str, ...] = ()
    definition_hash: str = ""
    finished_at: datetime | None = None
    compensation_started_at: datetime | None = None
    escalations: int = 0
    escalation_evidence: Evidence | None = None
    approval_evidence: Mapping[RunKey, Evidence] = field(default_factory=dict)
    tallies: Mapping[RunKey, OperationTally] = field(default_factory=dict)
    last_error: str = ""
    last_error_class: str | None = None
    # The operation the last error was about: once it succeeds, the error is shown recovered.
    last_error_run: RunKey | None = None


def start_record(definition: SagaDefinition, event: SagaStarted, stream_version: int) -> SagaRecord:
    """The record of a saga that has just started."""
    state = evolve(SagaState.initial(definition), event)
    return SagaRecord(
        saga_id=event.saga_id,
        definition=definition,
        state=state,
        stream_version=stream_version,
        started_at=event.at,
        updated_at=event.at,
        secrets=secret_values(definition, event.input),
        definition_hash=event.definition_hash,
    )


def _needed_approval(record: SagaRecord, event: StepStarted) -> bool:
    """Whether this start ran although an approval was asked for (or required) and not given."""
    run = record.state.run(event.step_id, event.kind)
    if run.approval is not None:
        return run.approval.status != "granted"
    policy = record.definition.approval_policy(event.step_id, event.kind)
    return policy is not None and policy.required


def _tally(record: SagaRecord, event: StepEvent) -> OperationTally:
    tally = record.tallies.get((event.step_id, event.kind), NO_TALLY)
    match event:
        case StepStarted():
            return _with(
                tally,
                starts=tally.starts + 1,
                first_started_at=tally.first_started_at or event.at,
                started_without_approval=tally.started_without_approval
                or _needed_approval(record, event),
            )
        case StepSucceeded():
            receipt = _receipt_identity(event.receipt)
            return _with(
                tally,
                successes=tally.successes + 1,
                receipts=tally.receipts | {receipt},
                succeeded_at=tally.succeeded_at or event.at,
            )
        case StepFailed() if event.error_class is ErrorClass.AMBIGUOUS:
            return _with(tally, ambiguous=tally.ambiguous + 1)
        case StepFailed():
            return _with(tally, failures=tally.failures + 1)
        case StepOutcomeUnknown():
            return _with(tally, ambiguous=tally.ambiguous + 1)
        case ReconciliationResult(result="found"):
            return _with(tally, reconciliations_found=tally.reconciliations_found + 1)
        case ReconciliationResult(result="absent"):
            return _with(tally, reconciliations_absent=tally.reconciliations_absent + 1)
        case ReconciliationResult():
            return _with(tally, reconciliations_unknown=tally.reconciliations_unknown + 1)
    return tally


def _receipt_identity(receipt: Receipt) -> Hashable:
    """A value equal for equal receipts, to count the distinct ones of an operation.

    Flat fields of exact str/int/None values (the common receipt) compare as a sorted
    tuple, without serialising; anything else as its canonical JSON text. A tuple never
    equals a text, and both keep 1, 1.0, True and "1" apart, as JSON does."""
    fields = receipt.fields
    if all(type(value) in _FLAT for value in fields.values()):
        return (receipt.resource_id, receipt.version, receipt.status, *sorted(fields.items()))
    return canonical_json(receipt.model_dump(mode="json"))


_FLAT: Final = frozenset({str, int, type(None)})


def evolve_record(record: SagaRecord, event: SagaEvent, stream_version: int) -> SagaRecord:
    """Fold one more event (at ``stream_version``) into the record; pure."""
    changes: dict[str, object] = {}
    if isinstance(event, StepEvent):
        # Counted against the state *before* the event (an approval's status at start).
        changes["tallies"] = {**record.tallies, (event.step_id, event.kind): _tally(record, event)}
    match event:
        case StepFailed():
            changes["last_error"] = f"{event.step_id} ({event.kind}): {event.message}".rstrip(": ")
            changes["last_error_class"] = str(event.error_class)
            changes["last_error_run"] = (event.step_id, event.kind)
        case StepOutcomeUnknown():
            changes["last_error"] = (
                f"{event.step_id} ({event.kind}): outcome unknown, {event.reason}"
            )
            changes["last_error_class"] = str(ErrorClass.AMBIGUOUS)
            changes["last_error_run"] = (event.step_id, event.kind)
        case ApprovalRequested():
            key = (event.step_id, event.kind)
            changes["approval_evidence"] = {**record.approval_evidence, key: event.evidence}
        case ManualInterventionRequired():
            changes["escalations"] = record.escalations + 1
            changes["escalation_evidence"] = event.evidence
        case CompensationStarted():
            changes["compensation_started_at"] = record.compensation_started_at or event.at
        case SagaFinished():
            changes["finished_at"] = event.at
    state = evolve(record.state, event)
    if isinstance(event, PlanRevised):
        # The plan's next version (saga_core.agents.replans): rows name its steps and tools.
        changes["definition"] = state.definition
    return _with(
        record,
        state=state,
        stream_version=stream_version,
        updated_at=event.at,
        **changes,
    )


def replay(
    definition: SagaDefinition, events: Iterable[tuple[SagaEvent, int]]
) -> SagaRecord | None:
    """Fold (event, stream version) pairs from the first into a record; None if empty."""
    record: SagaRecord | None = None
    for event, version in events:
        if record is None:
            if not isinstance(event, SagaStarted):
                raise CorruptSagaStream(
                    f"a saga stream must start with SagaStarted, not {event.event_type}"
                )
            record = start_record(definition, event, version)
        else:
            record = evolve_record(record, event, version)
    return record


def fold_event(
    definitions: DefinitionStore,
    registry: EventRegistry,
    record: SagaRecord | None,
    recorded: RecordedEvent | ScannedEvent,
) -> SagaRecord:
    """Decode one stored saga event and fold it into ``record`` (None: the first event)."""
    if isinstance(recorded, ScannedEvent):
        event = registry.decode_scanned(recorded)
    else:
        event = registry.decode(recorded)
    if not isinstance(event, SagaEvent):
        raise CorruptSagaStream(
            f"{recorded.stream_id}@{recorded.stream_version} is not a saga event"
        )
    if record is None:
        if not isinstance(event, SagaStarted):
            raise CorruptSagaStream(f"{recorded.stream_id} does not start with SagaStarted")
        definition = definitions.by_hash(event.definition_hash)
        return start_record(definition, event, recorded.stream_version)
    return evolve_record(record, event, recorded.stream_version)


def last_error_recovered(record: SagaRecord) -> bool:
    """Whether the last error was recovered from: the operation it was about has since
    succeeded by itself (saga_core.engine.state.error_recovered)."""
    if record.last_error_run is None:
        return False
    step_id, kind = record.last_error_run
    runs = record.state.forward if kind is StepKind.FORWARD else record.state.compensation
    run = runs.get(step_id)
    return run is not None and error_recovered(run.status)
