"""The demo: a real fleet (worker processes, a sweeper) running trip sagas against the
sandbox providers with injected faults, with this process playing the operator.

Nobody acts by a typed name: at the start the demo adds two principals to the fleet's
directory, as an admin would with ``sagafleet principals add`` — the agent that registers
and starts the sagas, and a person with the ``approver`` and ``operator`` roles — and acts as
each only through the principal its API token proves. Every grant and denial in the log names
the authenticated approver, who is not the saga's starter (four eyes).

With ``waiting`` (``sagafleet demo --keep-servers``), a few more trips whose capture needs a
person are started and left unanswered, so the operator console has a queue to show: the
person signs in as the demo's approver (its token is issued anew after the run) and does what
the demo's operator did, from the browser.

It proves its own claims from the outside: terminal states come from the log, duplicate
effects and the business invariant from the providers' ledgers.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from application.principals.directory import PrincipalConflict, PrincipalDirectory
from events.definition_store.port import DefinitionConflict
from events.saga_log.port import LoadedSaga, SagaHistory
from saga_core import ApprovalPolicy, SagaDefinition
from saga_core.access.roles import (
    ADMIN_ROLE,
    AGENT_ROLE,
    APPROVER_ROLE,
    OPERATOR_ROLE,
    Principal,
    PrincipalKind,
)
from saga_core.contracts import SagaStatus, StepKind
from saga_core.definitions.validation import validate_definition
from saga_core.engine.events import (
    ApprovalDenied,
    ApprovalGranted,
    ApprovalRequested,
    ReconciliationResult,
    StepSucceeded,
)
from saga_core.engine.state import RunStatus
from saga_core.errors import SagaError
from sagafleet import sandbox
from sagafleet.example_sagas import trip_definition
from sagafleet.example_sagas.registration import register_trip
from sagafleet.processes import spawn_sagafleet, stop_processes
from sagafleet.sandbox import TripSandbox, ledger_for_saga, ledger_totals
from workers.fleet import Fleet

DEMO_DEFINITION = "trip_demo"
AGENT = "demo-agent"
APPROVER = "demo-approver"
APPROVER_ROLES = frozenset({APPROVER_ROLE, OPERATOR_ROLE})
"""The demo's person approves and resolves: what a person in the operator console does."""
APPROVAL_TTL_S = 6.0
WAITING_AMOUNT = 250_000
"""A trip left for the console costs this much: above the capture gate's limit (100000)."""


def demo_definition() -> SagaDefinition:
    """The trip saga with approval requests short-lived enough to watch one expire: every
    step with an approval or a catalogue gate gets shorter validity (a definition may
    tighten a gate, never weaken it)."""
    trip = trip_definition()
    short = {"request_ttl_s": APPROVAL_TTL_S, "grant_ttl_s": 60.0}
    steps = []
    for step in trip.steps:
        spec = trip.tool_spec(step.id, StepKind.FORWARD)
        if step.approval is not None or (spec is not None and spec.gate is not None):
            approval = (step.approval or ApprovalPolicy()).model_copy(update=short)
            steps.append(step.model_copy(update={"approval": approval}))
        else:
            steps.append(step)
    return trip.model_copy(update={"name": DEMO_DEFINITION, "steps": steps})


def register_demo_definition(fleet: Fleet) -> int:
    """Register the demo definition in the shared set (shipped with sagafleet, as the trip
    is: every tenant, the chaos run's agents too, may start it); an older sagafleet's demo
    keeps its version, we take the next free one (a registered name and version never
    changes its content)."""
    definition = validate_definition(demo_definition(), fleet.catalogue)
    for version in range(1, 1000):
        try:
            fleet.definitions.register_shared(
                definition.model_copy(update={"version": version}), registered_by="demo")
            return version
        except DefinitionConflict:
            continue
    raise DefinitionConflict("no free version of the demo definition below 1000")


def _fraction(*parts: object) -> float:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def trip_input(index: int, seed: int) -> dict[str, Any]:
    """A plausible trip; about one in five costs more than the approval limit, and about one
    in eight travellers has an address outside the internal domains (the itinerary mail
    then needs a person too)."""
    expensive = _fraction(seed, "expensive", index) < 0.2
    external = _fraction(seed, "external", index) < 0.125
    domain = "travel.example.org" if external else "example.com"
    return {
        "customer_email": f"traveller{index}@{domain}",
        "flight_id": f"FL{100 + index % 40}",
        "hotel_id": f"HT{200 + index % 25}",
        "nights": 1 + index % 5,
        "amount": 150_000 + index if expensive else 40_000 + 10 * index,
        "currency": "EUR",
        "card_token": f"tok_visa_{seed}_{index:04d}",
    }


@dataclass
class DemoOptions:
    """The demo's knobs."""

    sagas: int = 20
    workers: int = 2
    fault_rate: float = 0.1
    seed: int = 7
    timeout_s: float = 240.0
    lease_s: float = 8.0
    queue_wait_s: float = 3.0
    waiting: int = 0
    """Trips (of the shipped ``trip`` definition) left waiting for a person, for the console."""


def demo_principal(fleet: Fleet, name: str, kind: PrincipalKind,
                   roles: frozenset[str]) -> Principal:
    """Add ``name`` to the demo's tenant (or, from an earlier demo, issue it a new token) and
    return the principal that token proves, as every entry proves its caller."""
    directory: PrincipalDirectory = fleet.principals
    try:
        issued = directory.add("default", name, kind, roles)
    except PrincipalConflict:
        issued = directory.rotate("default", name)
    return fleet.authenticate(issued.token)


@dataclass
class Operator:
    """Plays the human: lets the first request expire (it is asked again), then approves
    three of every four requests and denies the fourth, always as a person the fleet's
    directory authenticated by its API token (never the agent that started the sagas:
    gates need four eyes).

    Only a person of the saga's own tenant may answer its request (the fleet does not even
    show another tenant's saga), so the operator answers with ``approver`` in that
    approver's tenant and with ``approvers[tenant]`` in any other. A request it cannot
    answer -- no approver of the saga's tenant, or the fleet refusing the answer -- is
    counted in ``refused`` by why, never passed over silently: an unanswered request
    expires, and after its last re-ask the saga waits for a person in
    MANUAL_INTERVENTION."""

    approver: Principal
    approvers: dict[str, Principal] = field(default_factory=dict)
    expired_one: str | None = None
    expired_request: datetime | None = None
    answered: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)

    def approver_for(self, tenant: str) -> Principal | None:
        """The person who answers for ``tenant``'s sagas, if the operator has one."""
        if tenant in self.approvers:
            return self.approvers[tenant]
        return self.approver if self.approver.tenant == tenant else None

    def review(self, fleet: Fleet, loaded: LoadedSaga) -> None:
        """Answer this saga's open approval requests."""
        for run in [*loaded.state.forward.values(), *loaded.state.compensation.values()]:
            approval = run.approval
            if approval is None or run.status is not RunStatus.AWAITING_APPROVAL:
                continue
            if approval.status != "requested":
                continue
            if self.expired_one is None:
                self.expired_one, self.expired_request = loaded.saga_id, approval.requested_at
            if self.expired_one == loaded.saga_id and approval.requested_at == self.expired_request:
                continue  # never answered: it expires and decide asks again
            approver = self.approver_for(loaded.tenant)
            if approver is None:
                self.refused[f"no approver in tenant {loaded.tenant}"] += 1
                continue
            client = fleet.client_for(approver)
            try:
                if sum(self.answered.values()) % 4 == 1:
                    client.deny(loaded.saga_id, run.step_id, kind=run.kind,
                                reason="amount above the customer's stated budget")
                    self.answered["denied"] += 1
                else:
                    client.approve(loaded.saga_id, run.step_id, kind=run.kind,
                                   action_hash=approval.action_hash)
                    self.answered["approved"] += 1
            except SagaError as exc:
                # Expired or changed meanwhile (the next look sees the new request), or
                # refused outright: counted by its type either way.
                self.refused[type(exc).__name__] += 1


class FleetProcesses:
    """The worker, sweeper and projector processes of the demo, started and stopped together."""

    def __init__(self, env: dict[str, str], workers: int, log_dir: Path) -> None:
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        for index in range(workers):
            self._spawn(f"worker-{index}", ["worker"])
        self._spawn("sweeper", ["sweeper"])
        self._spawn("projector", ["projector"])

    def _spawn(self, name: str, args: list[str]) -> None:
        self.procs.append(spawn_sagafleet(args, self.env, self.log_dir / f"{name}.log"))

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL whatever is still there after 10 s."""
        stop_processes(self.procs)


class Progress:
    """A progress bar on a terminal; a line now and then anywhere else."""

    def __init__(self, total: int, stream: Any) -> None:
        self.total, self.stream = total, stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self.last: tuple[int, int] = (-1, -1)

    def show(self, done: int) -> None:
        """Redraw when something changed (terminal) or every ten seconds (log)."""
        elapsed = time.monotonic() - self.started
        if self.tty:
            if (done, int(elapsed)) == self.last:
                return
            self.last = (done, int(elapsed))
            width = 30
            filled = int(width * done / max(self.total, 1))
            self.stream.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] "
                              f"{done}/{self.total} settled  {elapsed:5.0f}s")
        else:
            if (done, int(elapsed) // 10) == self.last:
                return
            self.last = (done, int(elapsed) // 10)
            self.stream.write(f"  {done}/{self.total} settled after {elapsed:.0f}s\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self.tty:
            self.stream.write("\n")


def run(
    fleet: Fleet, trip: TripSandbox, env: dict[str, str], options: DemoOptions, log_dir: Path
) -> dict[str, Any]:
    """Run the demo on an already-migrated fleet whose tools are ``trip``'s (the sandbox
    installed); return the summary document."""
    client = fleet.client_for(demo_principal(fleet, AGENT, PrincipalKind.AGENT,
                                             frozenset({AGENT_ROLE, ADMIN_ROLE})))
    version = register_demo_definition(fleet)
    approver = demo_principal(fleet, APPROVER, PrincipalKind.PERSON, APPROVER_ROLES)
    faults = trip.faults
    faults.clear()
    # The hit log outlives runs on one database: this run counts only its own hits.
    mark = faults.last_hit()
    if options.fault_rate > 0:
        faults.configure_mix(options.fault_rate, options.seed)
    processes = FleetProcesses(env, options.workers, log_dir)
    operator = Operator(approver)
    progress = Progress(options.sagas, sys.stderr)
    started = time.monotonic()
    try:
        saga_ids = [
            client.start(DEMO_DEFINITION, trip_input(i, options.seed), version=version,
                         key=f"demo-{options.seed}-{started}-{i}",
                         reason="customer asked the agent to book a trip").saga_id
            for i in range(options.sagas)
        ]
        held = start_waiting(fleet, client, options, started)
        settled: dict[str, LoadedSaga] = {}
        while len(settled) < len(saga_ids) and time.monotonic() - started < options.timeout_s:
            for saga_id in saga_ids:
                if saga_id in settled:
                    continue
                loaded = fleet.repo.load(saga_id)
                status = loaded.state.status
                if status.is_terminal or status is SagaStatus.MANUAL_INTERVENTION:
                    settled[saga_id] = loaded
                else:
                    operator.review(fleet, loaded)
            progress.show(len(settled))
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        progress.close()
        waiting = wait_for_a_person(fleet, held, started + options.timeout_s)
    finally:
        processes.stop()
    finals = {sid: fleet.repo.load_history(sid) for sid in saga_ids}
    summary = summarize(trip, finals, operator, elapsed, faults.hit_counts(after=mark))
    summary["waiting_for_a_person"] = waiting
    return summary


def start_waiting(fleet: Fleet, client: Any, options: DemoOptions, started: float) -> list[str]:
    """Start ``options.waiting`` trips of the shipped definition whose capture needs a person
    (nobody in the demo answers them); returns their ids."""
    if options.waiting <= 0:
        return []
    register_trip(fleet)
    return [client.start("trip", {**trip_input(1000 + i, options.seed),
                                  "amount": WAITING_AMOUNT},
                         key=f"demo-waiting-{options.seed}-{started}-{i}",
                         reason="customer asked for an expensive trip").saga_id
            for i in range(options.waiting)]


def wait_for_a_person(fleet: Fleet, saga_ids: list[str], deadline: float) -> list[str]:
    """Wait (until ``deadline``) for each of ``saga_ids`` to ask a person something or to
    settle; returns those that wait for a person."""
    def asks(loaded: LoadedSaga) -> bool:
        state = loaded.state
        return state.status is SagaStatus.MANUAL_INTERVENTION or any(
            run.status is RunStatus.AWAITING_APPROVAL
            for run in [*state.forward.values(), *state.compensation.values()])

    pending = list(saga_ids)
    while pending and time.monotonic() < deadline:
        pending = [sid for sid in pending
                   if not (asks(loaded := fleet.repo.load(sid))
                           or loaded.state.status.is_terminal)]
        time.sleep(0.2)
    return [sid for sid in saga_ids if asks(fleet.repo.load(sid))]


def summarize(
    trip: TripSandbox,
    finals: dict[str, SagaHistory],
    operator: Operator,
    elapsed: float,
    fault_hits: dict[str, int],
) -> dict[str, Any]:
    """The demo's summary: states from the log, effects from the providers' ledgers."""
    states: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    violations: list[str] = []
    manual: list[dict[str, Any]] = []
    non_terminal = 0
    for saga_id, loaded in finals.items():
        status = loaded.state.status
        states[str(status)] += 1
        if not status.is_terminal and status is not SagaStatus.MANUAL_INTERVENTION:
            non_terminal += 1
        if status is SagaStatus.MANUAL_INTERVENTION and loaded.state.escalation is not None:
            manual.append({"saga_id": saga_id, "reason": loaded.state.escalation.reason})
        for event in loaded.events:
            if isinstance(event, StepSucceeded) and event.kind is StepKind.COMPENSATION:
                counts["compensations"] += 1
            elif isinstance(event, ReconciliationResult):
                counts[f"reconciliations_{event.result}"] += 1
            elif isinstance(event, ApprovalRequested):
                counts["approvals_requested"] += 1
            elif isinstance(event, ApprovalGranted):
                counts["approvals_granted"] += 1
            elif isinstance(event, ApprovalDenied):
                counts["approvals_denied"] += 1
        ledger = ledger_for_saga(trip.db, saga_id)
        if status is SagaStatus.COMPLETED and not ledger.is_complete_trip:
            violations.append(f"{saga_id}: COMPLETED but the ledgers show no complete trip")
        if status is SagaStatus.COMPENSATED and not ledger.is_unwound:
            violations.append(f"{saga_id}: COMPENSATED but holds or a net charge remain")
    totals = ledger_totals(trip.db)
    duplicates = [d for d in totals.duplicate_effects if d.saga_id in finals]
    return {
        "sagas": len(finals),
        "terminal_states": dict(sorted(states.items())),
        "non_terminal": non_terminal,
        "manual_intervention": manual,
        "duplicate_effects": len(duplicates),
        "duplicate_effect_details": [str(d) for d in duplicates],
        "invariant_violations": violations,
        "compensations": counts["compensations"],
        "reconciliations": {k.removeprefix("reconciliations_"): v
                            for k, v in counts.items() if k.startswith("reconciliations_")},
        "approvals": {
            "requested": counts["approvals_requested"],
            "granted": counts["approvals_granted"],
            "denied": counts["approvals_denied"],
            "left_to_expire": operator.expired_one,
            "refused": dict(sorted(operator.refused.items())),
            "approver": {"name": operator.approver.name, "kind": str(operator.approver.kind),
                         "roles": sorted(operator.approver.roles),
                         "authenticated": operator.approver.authenticated},
        },
        "faults_injected": dict(sorted(fault_hits.items())),
        "elapsed_s": round(elapsed, 2),
        "sagas_per_s": round(len(finals) / elapsed, 2) if elapsed > 0 else None,
    }


def child_env(database_url: str, broker_url: str, options: DemoOptions) -> dict[str, str]:
    """Environment for the demo's processes: the resolved endpoints and short timings."""
    env = dict(os.environ)
    env.update({
        # The demo runs the trip against the sandbox providers, whatever tools are configured.
        "SAGAFLEET_TOOLS": sandbox.TOOL_SET,
        "SAGAFLEET_DATABASE_URL": database_url,
        "SAGAFLEET_BROKER_URL": broker_url,
        "SAGAFLEET_LEASE_SECONDS": str(options.lease_s),
        "SAGAFLEET_QUEUE_WAIT_SECONDS": str(options.queue_wait_s),
        "SAGAFLEET_SWEEP_INTERVAL_SECONDS": "1",
    })
    return env
