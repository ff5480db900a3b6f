"""Executing one step command: claim by stream version, call the tool, record the result.

The order is the contract (DESIGN.md, execution rules 1-3 and 9):

1. fold the saga and check the claim; append ``StepStarted`` (key, request hash, lease)
   at the expected version — intent is committed before any effect;
2. call the tool with the stable operation key;
3. append the result (``StepSucceeded`` with the receipt, ``StepFailed`` with its class,
   or ``StepOutcomeUnknown``) together with whatever decide schedules next, then publish.

A command for an operation awaiting reconciliation runs ``lookup(key)`` instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from events import ConcurrencyError
from events.sagas import LoadedSaga, SagaNotFound
from saga_core import ResolvedCommand, check_claim, resolve_command
from saga_core.contracts import ErrorClass, Receipt
from saga_core.errors import EventRejected, TemplateError
from saga_core.events import (
    ReconciliationResult,
    SagaEvent,
    StepFailed,
    StepOutcomeUnknown,
    StepStarted,
    StepSucceeded,
)
from saga_core.state import IN_DOUBT, RunStatus, SagaState
from workers.messages import StepCommand
from workers.observability import step_scope
from workers.orchestrator import MAX_RACES, Committed, Orchestrator, RaceLost
from workers.secrets import SecretUnavailable, SecretVault, scrub
from workers.tools import Absent, ToolError, ToolRegistry, Unknown

log = logging.getLogger(__name__)

Verdict = Literal["executed", "reconciled", "dropped"]

#: Receives the siblings claimed together with a command, and the saga as that claim left
#: it, to run them side by side (each with :meth:`StepExecutor.run_claimed`).
SiblingRunner = Callable[[list[StepCommand], LoadedSaga], None]

#: Claimed-ahead resolutions a worker keeps for run_claimed; more only costs a re-resolve.
MAX_RESOLVED_AHEAD = 256


class SagaSession:
    """The branches of one saga this worker runs side by side share the latest committed
    state and take turns recording: their tools run concurrently, their commits do not
    race each other (each starts from the state the previous one left)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: LoadedSaga | None = None

    def record(
        self, known: LoadedSaga, commit: Callable[[LoadedSaga], Committed | None]
    ) -> Committed | None:
        """Run ``commit`` from the newest state this worker knows, and remember its result."""
        with self._lock:
            latest = self._latest
            start = latest if latest is not None and latest.version > known.version else known
            committed = commit(start)
            if committed is not None and (
                self._latest is None or committed.loaded.version > self._latest.version
            ):
                self._latest = committed.loaded
            return committed


@dataclass(frozen=True)
class StepOutcome:
    """What handling one command did, for logs, tests and the demo's counters."""

    command: StepCommand
    verdict: Verdict
    reason: str
    committed: Committed | None = None

    @property
    def follow_ups(self) -> tuple[StepCommand, ...]:
        """Commands the result scheduled (already published unless run inline)."""
        return self.committed.commands if self.committed else ()


class StepExecutor:
    """Runs step commands for one worker identity."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        tools: ToolRegistry,
        *,
        worker_id: str,
        lease: timedelta,
    ) -> None:
        self.orchestrator = orchestrator
        self.tools = tools
        self.worker_id = worker_id
        self.lease = lease
        self.vault = SecretVault(orchestrator.repo.store)
        # Commands claimed ahead (siblings, steps due next) with what their claim resolved:
        # run_claimed takes them instead of resolving the templates a second time.
        self._resolved: dict[StepCommand, ResolvedCommand] = {}
        self._resolved_lock = threading.Lock()

    def handle(
        self,
        command: StepCommand,
        *,
        publish: bool = True,
        known: LoadedSaga | None = None,
        claim_next: bool = False,
        siblings: SiblingRunner | None = None,
        session: SagaSession | None = None,
    ) -> StepOutcome:
        """Handle one wake-up: claim and execute, reconcile, or drop a stale duplicate.

        ``known`` is the saga as the caller last committed it; a stale one only costs a lost
        race and a re-read. With ``claim_next`` the result's commit also claims the saga's
        steps due next for this worker (``outcome.committed.claimed``): run them with
        :meth:`run_claimed`. With ``siblings`` every other step of the saga that is due is
        claimed in the same append as this one and handed to ``siblings`` before this
        command's tool is called (a wake-up stands for all of them, see ``wake_ups``).
        """
        for _ in range(MAX_RACES):
            try:
                loaded = known or self.orchestrator.repo.load(command.saga_id)
            except SagaNotFound:
                return StepOutcome(command, "dropped", "unknown saga")
            known = None
            try:
                run = loaded.state.run(command.step_id, command.kind)
            except EventRejected:
                return StepOutcome(command, "dropped", "unknown step")
            if run.status is RunStatus.RECONCILING and run.attempt == command.attempt:
                return self._reconcile(command, loaded, publish=publish)
            now = self.orchestrator.clock()
            try:
                claim = self._claim(loaded.state, command, now)
            except TemplateError as exc:
                # The definition was validated, so this means a receipt lacks a field the
                # tool promised: a permanent, definite failure (nothing was dispatched).
                return self._record_unclaimed_failure(command, str(exc), publish=publish)
            if isinstance(claim, str):
                return StepOutcome(command, "dropped", claim)
            started, resolved = claim
            others = (
                self._claimable(loaded.state, now, skip=command) if siblings is not None else []
            )
            claims = [started, *(event for _, event in others)]
            try:
                appended = self.orchestrator.repo.append(
                    command.saga_id, loaded.tenant, claims, loaded.version
                )
            except ConcurrencyError:
                continue  # someone else wrote first: re-read and re-decide
            claimed = loaded.extended(claims, appended)
            if others and siblings is not None:
                siblings([sibling for sibling, _ in others], claimed)
            return self._execute(command, resolved, claimed, publish=publish,
                                 claim_next=claim_next, session=session)
        raise RaceLost(f"saga {command.saga_id}: lost {MAX_RACES} claim races in a row")

    def run_claimed(
        self, command: StepCommand, loaded: LoadedSaga, *, publish: bool = True,
        claim_next: bool = False, session: SagaSession | None = None,
    ) -> StepOutcome:
        """Execute a step this worker claimed in its previous commit (see ``claim_next``)."""
        with self._resolved_lock:
            resolved = self._resolved.pop(command, None)
        if resolved is None:
            resolved = resolve_command(loaded.state, command.step_id, command.kind)
        return self._execute(command, resolved, loaded, publish=publish, claim_next=claim_next,
                             session=session)

    def _claim(
        self, state: SagaState, command: StepCommand, now: datetime
    ) -> tuple[StepStarted, ResolvedCommand] | str:
        """The StepStarted that claims ``command`` now, or why it cannot be claimed."""
        verdict = check_claim(state, command.step_id, command.kind, command.attempt, now)
        if not verdict:
            return verdict.reason
        resolved = resolve_command(state, command.step_id, command.kind)
        started = StepStarted(
            at=now,
            step_id=command.step_id,
            kind=command.kind,
            attempt=command.attempt,
            operation_key=resolved.operation_key,
            request_hash=resolved.request_hash,
            worker_id=self.worker_id,
            lease_expires_at=now + self.lease,
        )
        return started, resolved

    def _claimable(
        self, state: SagaState, now: datetime, skip: StepCommand | None = None
    ) -> list[tuple[StepCommand, SagaEvent]]:
        """Every scheduled step of the saga this worker may claim now (but ``skip``, claimed
        already), with its StepStarted."""
        found: list[tuple[StepCommand, SagaEvent]] = []
        for run in [*state.forward.values(), *state.compensation.values()]:
            if run.status is not RunStatus.SCHEDULED:
                continue
            candidate = StepCommand(saga_id=state.saga_id, step_id=run.step_id, kind=run.kind,
                                    attempt=run.attempt)
            if candidate == skip:
                continue
            try:
                claim = self._claim(state, candidate, now)
            except TemplateError:
                continue  # left to the normal path, which records the failure
            if not isinstance(claim, str):
                found.append((candidate, claim[0]))
                self._keep_resolved(candidate, claim[1])
        return found

    def _keep_resolved(self, command: StepCommand, resolved: ResolvedCommand) -> None:
        """Remember a claim's resolution for run_claimed (bounded: a claim whose commit lost
        a race is never run, and the oldest such entries are dropped)."""
        with self._resolved_lock:
            self._resolved.pop(command, None)
            self._resolved[command] = resolved
            if len(self._resolved) > MAX_RESOLVED_AHEAD:
                del self._resolved[next(iter(self._resolved))]

    def _execute(
        self, command: StepCommand, resolved: ResolvedCommand, claimed: LoadedSaga, *,
        publish: bool, claim_next: bool, session: SagaSession | None = None,
    ) -> StepOutcome:
        # The saga id travels with every call as context (providers tag their records with
        # it); the precondition goes along so the provider can refuse a changed target.
        args = {"saga_id": command.saga_id, **resolved.args, **resolved.precondition}
        try:
            args, revealed = self.vault.reveal(command.saga_id, args)
        except SecretUnavailable as exc:
            result: SagaEvent = StepFailed(
                at=self.orchestrator.clock(), step_id=command.step_id, kind=command.kind,
                attempt=command.attempt, operation_key=resolved.operation_key,
                error_class=ErrorClass.PERMANENT, message=str(exc))
        else:
            result = self._call_tool(command, resolved, args, revealed)
            if revealed and isinstance(result, StepFailed | StepOutcomeUnknown):
                # Error text goes into the log: never with a secret an adapter echoed.
                if isinstance(result, StepFailed):
                    result = result.model_copy(
                        update={"message": scrub(result.message, revealed)})
                else:
                    result = result.model_copy(
                        update={"detail": scrub(result.detail, revealed)})
        committed = self._record(command, result, publish=publish, known=claimed,
                                 claim_next=claim_next, session=session)
        return StepOutcome(command, "executed", type(result).__name__, committed)

    def _call_tool(
        self, command: StepCommand, resolved: ResolvedCommand, args: dict[str, object],
        secrets: dict[str, Any],
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
                detail = scrub(f"{type(exc).__name__}: {exc}", secrets)
                log.error("tool %s@%s crashed: %s", tool_name, version, detail)
                return StepOutcomeUnknown(at=now(), reason="crash", detail=detail, **common)
        return StepSucceeded(at=now(), receipt=receipt, via="execute", **common)

    def _record(
        self, command: StepCommand, result: SagaEvent, *, publish: bool, known: LoadedSaga,
        claim_next: bool = False, session: SagaSession | None = None,
    ) -> Committed | None:
        """Append the observed result unless the log already settled this attempt."""

        def build(loaded: LoadedSaga) -> Sequence[SagaEvent] | None:
            run = loaded.state.run(command.step_id, command.kind)
            if run.attempt != command.attempt:
                return None  # a later attempt exists; this observation is superseded
            if isinstance(result, StepSucceeded) and run.status in IN_DOUBT:
                # A receipt is a fact, even from a worker whose lease expired meanwhile.
                return [result]
            if run.status is RunStatus.STARTED and run.worker_id == self.worker_id:
                return [result]
            log.info("dropping %s for %s: the log moved on (%s)", type(result).__name__,
                     command, run.status)
            return None

        def commit(start: LoadedSaga) -> Committed | None:
            return self.orchestrator.record_with_retry(
                command.saga_id, build, publish=publish, known=start,
                claim_next=self._claimable if claim_next else None,
            )

        return session.record(known, commit) if session is not None else commit(known)

    def _reconcile(self, command: StepCommand, loaded: LoadedSaga, *, publish: bool) -> StepOutcome:
        run = loaded.state.run(command.step_id, command.kind)
        now = self.orchestrator.clock()
        if run.not_before is not None and now < run.not_before:
            return StepOutcome(command, "dropped", f"lookup not due before {run.not_before}")
        tool_name, version = loaded.definition.tool_for(command.step_id, command.kind)
        with step_scope(command.saga_id, command.step_id, command.kind.value, tool_name):
            try:
                found = self.tools.get(tool_name, version).lookup(run.operation_key)
            except Exception as exc:  # noqa: BLE001 - a failing lookup proves nothing
                found = Unknown(reason=f"lookup failed: {type(exc).__name__}: {exc}")
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

        def build(current: LoadedSaga) -> Sequence[SagaEvent] | None:
            now_run = current.state.run(command.step_id, command.kind)
            if now_run.status is not RunStatus.RECONCILING or now_run.attempt != command.attempt:
                return None  # another worker reconciled it already
            return [result]

        committed = self.orchestrator.record_with_retry(
            command.saga_id, build, publish=publish, known=loaded
        )
        return StepOutcome(command, "reconciled", result.result, committed)

    def _record_unclaimed_failure(
        self, command: StepCommand, message: str, *, publish: bool
    ) -> StepOutcome:
        def build(loaded: LoadedSaga) -> Sequence[SagaEvent] | None:
            run = loaded.state.run(command.step_id, command.kind)
            if run.status is not RunStatus.SCHEDULED or run.attempt != command.attempt:
                return None
            return [StepFailed(at=self.orchestrator.clock(), step_id=command.step_id,
                               kind=command.kind, attempt=command.attempt,
                               operation_key=run.operation_key,
                               error_class=ErrorClass.PERMANENT, message=message)]

        committed = self.orchestrator.record_with_retry(command.saga_id, build, publish=publish)
        return StepOutcome(command, "executed", "StepFailed", committed)


def _lookup_result(found: Receipt | Absent | Unknown) -> Literal["found", "absent", "unknown"]:
    if isinstance(found, Receipt):
        return "found"
    return "absent" if isinstance(found, Absent) else "unknown"
