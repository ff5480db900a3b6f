"""Executing one step command: claim by stream version, call the tool, record the result.

The order is the contract (DESIGN.md, execution rules 1-3 and 9):

1. fold the saga and check the claim; commit ``StepStarted`` (key, request hash, lease)
   at the expected version — intent is committed before any effect;
2. call the tool with the stable operation key;
3. commit the result (``StepSucceeded`` with the receipt, ``StepFailed`` with its class,
   or ``StepOutcomeUnknown``) together with whatever decide schedules next; the caller
   publishes the commit's wake-ups after it.

One operation key means one request: before step 1 commits ``StepStarted`` the worker
compares the request it is about to send with the hash the key was first claimed with
(``saga_core.key_reuse``); if they differ it records the escalation saga_core builds for
that instead, in the same commit at the same expected version, and calls no tool.

A receipt is a fact: a worker whose lease expired meanwhile still records it. Any other
result is recorded only while this worker still holds the claim, and a step this worker
no longer holds is never acted on. Every append goes through
:meth:`application.orchestrator.Orchestrator.commit`, each in an attempt of the orchestrator's
one retry loop (:meth:`~application.orchestrator.Orchestrator.attempts`) that this module runs
itself; :meth:`StepExecutor.handle` is the plain path (one command, nothing claimed ahead),
:class:`workers.branches.SagaBranches` the fleet's (siblings and next steps claimed in the
same commits, by :attr:`StepExecutor.claim_ahead`, and run side by side) built from the same
three steps: :meth:`~StepExecutor.claim`, :meth:`~StepExecutor.call`,
:meth:`~StepExecutor.record`. A command for an operation awaiting reconciliation runs
``lookup(key)`` instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from application.claiming import ClaimAhead, started_event
from application.messages import StepCommand
from application.orchestrator import Committed, Orchestrator, WindowLimitReached
from application.secrets.guard import SecretGuard
from application.secrets.placeholders import SecretUnavailable, reveal_with
from application.secrets.port import Secrets
from application.telemetry.logs import step_log_context
from application.telemetry.metrics import WorkerMetrics
from application.telemetry.sentry import step_scope
from application.telemetry.tracing import operation_span, set_outcome
from events.saga_log.port import LoadedSaga
from events.saga_log.streams import SagaNotFound
from saga_core import (
    KeyReuse,
    ResolvedCommand,
    check_claim,
    escalate_key_reuse,
    key_reuse,
    resolve_command,
)
from saga_core.contracts import ErrorClass, Receipt
from saga_core.engine.decide import ask_over_window
from saga_core.engine.events import (
    ReconciliationResult,
    SagaEvent,
    StepFailed,
    StepOutcomeUnknown,
    StepSucceeded,
)
from saga_core.engine.state import IN_DOUBT, RunStatus
from saga_core.errors import EventRejected, TemplateError
from saga_core.keys import check_key_payload
from saga_core.secret_scrub import SecretNeedles
from workers.tools import Absent, ToolError, ToolRegistry, Unknown

log = logging.getLogger(__name__)

Verdict = Literal["executed", "reconciled", "escalated", "dropped"]

#: Claimed-ahead resolutions a worker keeps for resolution(); more only costs a re-resolve.
MAX_RESOLVED_AHEAD = 256


@dataclass(frozen=True)
class StepOutcome:
    """What handling one command did, for logs, tests and the demo's counters."""

    command: StepCommand
    verdict: Verdict
    reason: str
    committed: Committed | None = None

    @property
    def follow_ups(self) -> tuple[StepCommand, ...]:
        """Commands the commit made due and left for others (none claimed here)."""
        return self.committed.commands if self.committed else ()


@dataclass(frozen=True)
class Claimed:
    """A command this worker now holds: what its claim resolved, and the claim's commit
    (whose ``claimed`` are the due siblings taken in the same append)."""

    command: StepCommand
    resolved: ResolvedCommand
    committed: Committed


class StepExecutor:
    """Claims, runs and records step commands for one worker identity."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        tools: ToolRegistry,
        secrets: Secrets,
        *,
        worker_id: str,
        lease: timedelta,
        metrics: WorkerMetrics | None = None,
        guard: SecretGuard | None = None,
    ) -> None:
        """``guard``: looks for the saga's secret values in what tools return (default: one
        of its own, counting into ``metrics``)."""
        self.orchestrator = orchestrator
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self.tools = tools
        self.secrets = secrets
        self.guard = guard if guard is not None else SecretGuard(secrets, self.metrics)
        self.worker_id = worker_id
        self.lease = lease
        #: What this worker asks a commit to claim ahead for it: every step due now.
        self.claim_ahead = ClaimAhead(worker_id=worker_id, lease=lease)
        # Commands claimed ahead (siblings, steps due next) with what their claim resolved:
        # resolution() takes them instead of resolving the templates a second time.
        self._resolved: dict[StepCommand, ResolvedCommand] = {}
        self._resolved_lock = threading.Lock()

    def handle(self, command: StepCommand) -> StepOutcome:
        """Handle one wake-up on its own: claim and execute, reconcile, or drop a stale
        duplicate. Claims nothing ahead and publishes nothing (see ``follow_ups``)."""
        claimed = self.claim(command)
        if isinstance(claimed, StepOutcome):
            return claimed
        loaded = claimed.committed.loaded
        result = self.call(command, claimed.resolved, loaded)
        return self.executed(command, result, self.record(command, result, loaded))

    def claim(
        self, command: StepCommand, *, ahead: ClaimAhead | None = None
    ) -> Claimed | StepOutcome:
        """Claim ``command`` (with ``ahead``, also what it claims of the saga's other due
        steps, in the same append), or settle it without a claim: drop a stale duplicate,
        reconcile an operation in doubt, record a step whose arguments cannot resolve."""
        with step_log_context(command.saga_id, command.step_id, command.kind.value,
                              command.attempt):
            claimed = self._claim(command, ahead)
        self.metrics.command_handled(
            claimed.verdict if isinstance(claimed, StepOutcome) else "executed")
        return claimed

    def _claim(self, command: StepCommand, ahead: ClaimAhead | None) -> Claimed | StepOutcome:
        try:
            loaded = self.orchestrator.log.load(command.saga_id)
        except SagaNotFound:
            return StepOutcome(command, "dropped", "unknown saga")
        try:
            run = loaded.state.run(command.step_id, command.kind)
        except EventRejected:
            return StepOutcome(command, "dropped", "unknown step")
        if run.status is RunStatus.RECONCILING and run.attempt == command.attempt:
            return self._reconcile(command, loaded)
        for attempt in self.orchestrator.attempts(command.saga_id, known=loaded):
            with attempt:
                claimed = self._claim_at(command, ahead, attempt.loaded)
        return claimed

    def _claim_at(
        self, command: StepCommand, ahead: ClaimAhead | None, loaded: LoadedSaga
    ) -> Claimed | StepOutcome:
        """Judge and commit the claim on ``loaded`` (ConcurrencyError: the saga moved)."""
        now = self.orchestrator.clock()
        verdict = check_claim(loaded.state, command.step_id, command.kind, command.attempt, now)
        if not verdict and verdict.ask_again:
            # The grant no longer holds at claim time: no claim, and decide asks a person
            # again (recorded here, so the request does not wait for the sweeper).
            asked = self.orchestrator.commit(loaded, ())
            return StepOutcome(command, "dropped", verdict.reason, asked)
        if not verdict:
            return StepOutcome(command, "dropped", verdict.reason)
        try:
            resolved = resolve_command(loaded.state, command.step_id, command.kind)
        except TemplateError as exc:
            # The definition was validated, so a receipt lacks a field the tool promised:
            # a permanent, definite failure (nothing was dispatched).
            return self._unresolvable(command, loaded, str(exc))
        reuse = key_reuse(loaded.state, resolved)
        if reuse is not None:
            return self._refuse_key_reuse(command, loaded, reuse)
        started = started_event(command, resolved, now, loaded.state,
                                worker_id=self.worker_id, lease=self.lease)
        try:
            committed = self.orchestrator.commit(loaded, [started], claim_ahead=ahead)
        except WindowLimitReached as over:
            return self._ask_over_window(command, loaded, over)
        self.metrics.claimed(resolved.tool, command.kind.value)
        self._took_ahead(committed)
        return Claimed(command, resolved, committed)

    def _ask_over_window(self, command: StepCommand, loaded: LoadedSaga,
                         over: WindowLimitReached) -> StepOutcome:
        """Record, in place of the claim and at its version, the approval request for a
        call that would pass its tenant window (with the window's total as evidence)."""
        now = self.orchestrator.clock()
        asked = ask_over_window(loaded.state, command.step_id, command.kind,
                                over.total.evidence(over.call), now).to_event(at=now)
        log.info("not calling %s: %s", command, over)
        committed = self.orchestrator.commit(loaded, [asked])
        return StepOutcome(command, "dropped", str(over), committed)

    def _took_ahead(self, committed: Committed | None) -> None:
        """Count the claims a commit took ahead for this worker, by their tools, and keep
        what each resolved to for :meth:`resolution`."""
        if committed is None:
            return
        for claimed, resolved in zip(committed.claimed, committed.resolved, strict=True):
            self._keep_resolved(claimed, resolved)
            self.metrics.claimed(resolved.tool, claimed.kind.value)

    def resolution(self, command: StepCommand, loaded: LoadedSaga) -> ResolvedCommand:
        """What the claim of ``command`` (claimed ahead in ``loaded``) resolved to."""
        with self._resolved_lock:
            resolved = self._resolved.pop(command, None)
        if resolved is None:
            resolved = resolve_command(loaded.state, command.step_id, command.kind)
            # The claim compared its own resolution; this one must send the same request.
            recorded = loaded.state.run(command.step_id, command.kind).request_hash
            check_key_payload(recorded, resolved.request_hash, resolved.operation_key)
        return resolved

    def _keep_resolved(self, command: StepCommand, resolved: ResolvedCommand) -> None:
        """Remember a claim's resolution for resolution() (bounded: the oldest entries, of
        claims some other path ran, are dropped)."""
        with self._resolved_lock:
            self._resolved.pop(command, None)
            self._resolved[command] = resolved
            if len(self._resolved) > MAX_RESOLVED_AHEAD:
                del self._resolved[next(iter(self._resolved))]

    def call(self, command: StepCommand, resolved: ResolvedCommand,
             loaded: LoadedSaga) -> SagaEvent:
        """Call the claimed command's tool with its operation key; the result as an event,
        with every secret value of the saga (``loaded``) the tool echoed replaced."""
        # The saga id travels with every call as context (providers tag their records with
        # it); the precondition goes along so the provider can refuse a changed target.
        args = {"saga_id": command.saga_id, **resolved.args, **resolved.precondition}
        try:
            # From the guard's read of the vault: the same values, one query per saga.
            args, _ = reveal_with(command.saga_id, args, lambda names: self.guard.kept(loaded))
        except SecretUnavailable as exc:
            return StepFailed(
                at=self.orchestrator.clock(), step_id=command.step_id, kind=command.kind,
                attempt=command.attempt, operation_key=resolved.operation_key,
                error_class=ErrorClass.PERMANENT, message=str(exc))
        # What the tool may echo (into its receipt, its error, its log lines): the values it
        # was given, and every other the saga keeps (a literal may carry one too).
        needles = self.guard.needles(loaded)
        kind = command.kind.value
        with step_log_context(command.saga_id, command.step_id, kind, command.attempt,
                              secrets=self.guard.watch(needles) if needles else None), \
                operation_span("saga.compensation" if kind == "compensation" else "saga.step",
                            saga_id=command.saga_id, step_id=command.step_id, kind=kind,
                            tool=resolved.tool, attempt=command.attempt) as span:
            began = time.perf_counter()
            result = self._call_tool(command, resolved, args, needles)
            outcome = _step_outcome(result)
            took = time.perf_counter() - began
            self.metrics.step_called(resolved.tool, kind, outcome, took)
            set_outcome(span, outcome)
            log.info("%s %s: %s in %.3fs", resolved.tool, kind, outcome, took)
        # Error text is for people (a short PIN in it is found too); the rest is a record.
        if isinstance(result, StepFailed):
            result = result.model_copy(update={"message": self.guard.text(
                result.message, needles, "tool_result")})
        elif isinstance(result, StepOutcomeUnknown):
            result = result.model_copy(update={"detail": self.guard.text(
                result.detail, needles, "tool_result")})
        return self.guard.events([result], needles, "tool_result")[0]

    def record(
        self, command: StepCommand, result: SagaEvent, known: LoadedSaga, *,
        ahead: ClaimAhead | None = None,
    ) -> Committed | None:
        """Commit the observed result (with ``ahead``, claiming what is due next in the same
        append) unless the log already settled this attempt; ``known`` is tried first."""
        return self.record_together(((command, result),), known, ahead=ahead)

    def record_together(
        self, results: Sequence[tuple[StepCommand, SagaEvent]], known: LoadedSaga, *,
        ahead: ClaimAhead | None = None,
    ) -> Committed | None:
        """Commit the observed results of one saga's commands in one append, each unless
        the log already settled its attempt (None when it settled them all)."""
        saga_id = results[0][0].saga_id
        for attempt in self.orchestrator.attempts(saga_id, known=known):
            with attempt:
                events = [result for command, result in results
                          if self._still_to_record(command, result, attempt.loaded)]
                committed = (self.orchestrator.commit(attempt.loaded, events, claim_ahead=ahead)
                             if events else None)
        self._took_ahead(committed)
        return committed

    def _still_to_record(self, command: StepCommand, result: SagaEvent,
                         loaded: LoadedSaga) -> bool:
        """Whether ``result`` is still this worker's to record in ``loaded``."""
        run = loaded.state.run(command.step_id, command.kind)
        if run.attempt != command.attempt:
            return False  # a later attempt exists; this observation is superseded
        if (isinstance(result, StepSucceeded) and run.status in IN_DOUBT
                and run.verify_since is None):
            # A receipt is a fact, even from a worker whose lease expired meanwhile (one
            # already recorded and waiting for its postcondition is not replaced).
            return True
        if run.status is RunStatus.STARTED and run.worker_id == self.worker_id:
            return True
        log.info("dropping %s for %s: the log moved on (%s)", type(result).__name__,
                 command, run.status)
        return False

    @staticmethod
    def executed(command: StepCommand, result: SagaEvent,
                 committed: Committed | None) -> StepOutcome:
        """The outcome of a command whose tool was called and whose result was recorded."""
        return StepOutcome(command, "executed", type(result).__name__, committed)

    def _call_tool(
        self, command: StepCommand, resolved: ResolvedCommand, args: dict[str, object],
        secrets: SecretNeedles,
    ) -> SagaEvent:
        tool_name, version, key = resolved.tool, resolved.version, resolved.operation_key
        now = self.orchestrator.clock
        common = {"step_id": command.step_id, "kind": command.kind,
                  "attempt": command.attempt, "operation_key": key}
        with step_scope(command.saga_id, command.step_id, command.kind.value, tool_name):
            try:
                tool = self.tools.get(tool_name, version)
            except Exception as exc:  # noqa: BLE001 - any lookup failure is permanent here
                return StepFailed(at=now(), error_class=ErrorClass.PERMANENT,
                                  message=f"tool not available: {exc}", **common)
            try:
                receipt = tool.execute(args, key)
            except ToolError as exc:
                if exc.error_class is ErrorClass.AMBIGUOUS:
                    return StepOutcomeUnknown(at=now(), reason="timeout", detail=str(exc),
                                              **common)
                return StepFailed(at=now(), error_class=exc.error_class, message=str(exc),
                                  **common)
            except Exception as exc:  # noqa: BLE001
                # An adapter bug after dispatch: we cannot know whether the effect happened.
                # No traceback in the log: its text may echo revealed secret arguments.
                detail = self.guard.text(f"{type(exc).__name__}: {exc}", secrets,
                                         "tool_result")
                log.error("tool %s@%s crashed: %s", tool_name, version, detail)
                return StepOutcomeUnknown(at=now(), reason="crash", detail=detail, **common)
        return StepSucceeded(at=now(), receipt=receipt, via="execute", **common)

    def _reconcile(self, command: StepCommand, loaded: LoadedSaga) -> StepOutcome:
        run = loaded.state.run(command.step_id, command.kind)
        now = self.orchestrator.clock()
        if run.not_before is not None and now < run.not_before:
            return StepOutcome(command, "dropped", f"lookup not due before {run.not_before}")
        tool_name, version = loaded.definition.tool_for(command.step_id, command.kind)
        # A provider may have kept the arguments it was called with, and log or answer with
        # them: its log lines and its answer are looked through for the saga's values.
        needles = self.guard.needles(loaded)
        with step_log_context(command.saga_id, command.step_id, command.kind.value,
                              command.attempt,
                              secrets=self.guard.watch(needles) if needles else None), \
                step_scope(command.saga_id, command.step_id, command.kind.value, tool_name), \
                operation_span("saga.reconcile", saga_id=command.saga_id,
                               step_id=command.step_id, kind=command.kind.value,
                               tool=tool_name, attempt=command.attempt) as span:
            try:
                found = self.tools.get(tool_name, version).lookup(run.operation_key)
            except Exception as exc:  # noqa: BLE001 - a failing lookup proves nothing
                found = Unknown(reason=f"lookup failed: {type(exc).__name__}: {exc}")
            set_outcome(span, _lookup_result(found))
        self.metrics.reconciled(tool_name, command.kind.value, _lookup_result(found))
        result = ReconciliationResult(
            at=self.orchestrator.clock(),
            step_id=command.step_id,
            kind=command.kind,
            attempt=command.attempt,
            operation_key=run.operation_key,
            result=_lookup_result(found),
            receipt=found if isinstance(found, Receipt) else None,
            detail="" if isinstance(found, Receipt) else found.reason,
        )
        if not isinstance(found, Receipt):
            result = result.model_copy(update={"detail": self.guard.text(
                result.detail, needles, "lookup")})
        result = self.guard.events([result], needles, "lookup")[0]

        for attempt in self.orchestrator.attempts(command.saga_id, known=loaded):
            with attempt:
                now_run = attempt.loaded.state.run(command.step_id, command.kind)
                # None: another worker reconciled it already.
                committed = (self.orchestrator.commit(attempt.loaded, [result])
                             if now_run.status is RunStatus.RECONCILING
                             and now_run.attempt == command.attempt else None)
        return StepOutcome(command, "reconciled", result.result, committed)

    def _refuse_key_reuse(
        self, command: StepCommand, loaded: LoadedSaga, reuse: KeyReuse
    ) -> StepOutcome:
        """Record, in place of the claim and at its version, that this attempt would reuse
        its operation key with another request: the saga escalates, no tool is called."""
        now = self.orchestrator.clock()
        escalation = escalate_key_reuse(loaded.state, reuse, now).to_event(at=now)
        log.warning("not calling %s: %s", command, reuse.reason)
        committed = self.orchestrator.commit(loaded, [escalation])
        return StepOutcome(command, "escalated", reuse.reason, committed)

    def _unresolvable(self, command: StepCommand, loaded: LoadedSaga, message: str) -> StepOutcome:
        """Record that a scheduled step's arguments cannot be resolved (in this attempt's
        commit: a lost race re-reads and re-judges the claim first)."""
        run = loaded.state.run(command.step_id, command.kind)
        if run.status is not RunStatus.SCHEDULED:
            return StepOutcome(command, "dropped", f"unresolvable and {run.status}: {message}")
        failed = StepFailed(at=self.orchestrator.clock(), step_id=command.step_id,
                            kind=command.kind, attempt=command.attempt,
                            operation_key=run.operation_key, error_class=ErrorClass.PERMANENT,
                            message=message)
        return self.executed(command, failed, self.orchestrator.commit(loaded, [failed]))


def _step_outcome(result: SagaEvent) -> str:
    """How a tool call ended, for metrics and spans
    (``application.telemetry.metrics.STEP_OUTCOMES``)."""
    if isinstance(result, StepSucceeded):
        return "succeeded"
    return "unknown" if isinstance(result, StepOutcomeUnknown) else "failed"


def _lookup_result(found: Receipt | Absent | Unknown) -> Literal["found", "absent", "unknown"]:
    if isinstance(found, Receipt):
        return "found"
    return "absent" if isinstance(found, Absent) else "unknown"
