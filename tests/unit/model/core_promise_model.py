"""A model of the core promise, run by Hypothesis against the real engine (``TestFleet``).

The state machine generates a saga shape — up to four forward steps over tools of every step
semantics (a provider that dedupes by key, a reconcilable one that does not, a read, a gated
payment), random dependencies (parallel branches), and maybe an irreversible pivot after
all of them — starts one or two sagas on it, then interleaves the moves a fleet meets:
one queued message handled, all of them, messages lost, old messages delivered again, a
stale wake-up for any operation the log knows, a worker dying before or after its call
(its message maybe redelivered once its lease ran out), a sweeper pass, a fault armed on a
tool (or on whichever is called next), the clock jumped (with or without the fleet
noticing), an approval granted or denied (a payment's, an undo's), a cancel.

After every move it checks what the engine promises, judged from the tools' own calls and
books and from the events, never from the engine's own verdicts:

* no operation key of a tool that does not dedupe is called again after a call that may
  have committed, unless a lookup answered "absent" in between, at or after the call's
  commit horizon;
* no duplicate net effect: one committed effect per key, per step and kind;
* compensations run only in dependency order (every later step that may have an effect is
  undone first), and never once the pivot succeeded;
* every step state agrees with the events: the fold of the recorded events equals the
  state the fleet loads, and each run's status is the one its last event says;
* a gate asks a person exactly when the amount is above its limit, for the shorter of
  the declared request TTLs, and a gated call never starts without a grant;
* a terminal saga has nothing waiting, and a denied request is never still awaiting.

At the end (teardown) faults are cleared and time runs on for hours: every saga must then
be finished or waiting for a person in MANUAL_INTERVENTION, never stalled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from application.messages import StepCommand
from saga_core import SagaDefinition, ToolCatalogue
from saga_core.contracts import Receipt, StepKind
from saga_core.engine.claims import due_work
from saga_core.engine.decide import decide
from saga_core.engine.events import (
    ApprovalDenied,
    ApprovalGranted,
    ApprovalRequested,
    SagaEvent,
    StepFailed,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
    StepSucceeded,
)
from saga_core.engine.state import RunStatus, SagaState, fold
from saga_core.errors import SagaError
from sagafleet.testing import ANY_TOOL, Fault, InMemoryTools, TestFleet

FORWARD, COMPENSATION = StepKind.FORWARD, StepKind.COMPENSATION

#: The payment gate's limit: an amount above it asks a person, one at it does not.
GATE_LIMIT = 1000
#: The catalogue gate's request TTL; a definition may declare another, the shorter wins.
GATE_REQUEST_TTL_S = 600.0
LEASE_S = 30.0

CATALOGUE = ToolCatalogue.model_validate({"tools": [
    # A provider that deduplicates by operation key: a retry after a lease is safe.
    {"name": "hold.place", "semantics": "compensable", "dedupes_by_key": True,
     "commit_horizon_s": 30, "receipt_fields": ["step"],
     "args": {"step": {"type": "string"}, "item": {"type": "string"}}},
    {"name": "hold.release", "semantics": "idempotent_by_key", "dedupes_by_key": True,
     "commit_horizon_s": 30, "args": {"step": {"type": "string"}, "id": {"type": "string"}}},
    # Reconcilable but not deduplicating: a repeat is a second effect, so an ambiguous
    # outcome waits out the commit horizon and a lookup before any retry.
    {"name": "note.write", "semantics": "compensable", "dedupes_by_key": False,
     "commit_horizon_s": 20, "receipt_fields": ["step"],
     "args": {"step": {"type": "string"}, "text": {"type": "string"}}},
    {"name": "note.erase", "semantics": "idempotent_by_key", "dedupes_by_key": True,
     "commit_horizon_s": 20, "args": {"step": {"type": "string"}, "id": {"type": "string"}}},
    {"name": "info.read", "semantics": "read_only", "dedupes_by_key": True,
     "args": {"step": {"type": "string"}}},
    # A gated payment: above GATE_LIMIT a person other than the starter approves.
    {"name": "pay.charge", "semantics": "offsettable", "dedupes_by_key": True,
     "commit_horizon_s": 60, "receipt_fields": ["step", "amount"],
     "args": {"step": {"type": "string"}, "amount": {"type": "number"}},
     "gate": {"risk_class": "money", "above": {"arg": "amount", "limit": GATE_LIMIT},
              "role": "approver", "four_eyes": True, "request_ttl_s": GATE_REQUEST_TTL_S}},
    {"name": "pay.refund", "semantics": "idempotent_by_key", "dedupes_by_key": True,
     "commit_horizon_s": 60, "args": {"step": {"type": "string"}, "id": {"type": "string"}}},
    # The irreversible pivot, which does not deduplicate either.
    {"name": "mail.send", "semantics": "irreversible", "dedupes_by_key": False,
     "commit_horizon_s": 40, "receipt_fields": ["step"],
     "args": {"step": {"type": "string"}, "to": {"type": "string"}}},
]})

#: Tool kinds a generated forward step may use (the pivot is always mail.send).
KINDS = ("hold", "note", "read", "pay")
_UNDO = {"hold": "hold.release", "note": "note.erase", "pay": "pay.refund"}
_TOOL = {"hold": "hold.place", "note": "note.write", "read": "info.read", "pay": "pay.charge"}
RETRY = {"max_attempts": 3, "base_delay_s": 1.0, "max_delay_s": 5.0}


@dataclass(frozen=True)
class StepShape:
    """One generated forward step: its tool kind, what it depends on, for a payment the
    TTL its definition declares, and whether its undo needs a person."""

    kind: str
    depends_on: tuple[int, ...]
    request_ttl_s: float | None = None
    undo_needs_approval: bool = False


@dataclass(frozen=True)
class SagaShape:
    """A generated saga: forward steps, and whether an irreversible pivot ends it."""

    steps: tuple[StepShape, ...]
    pivot: bool


@st.composite
def saga_shapes(draw: st.DrawFn) -> SagaShape:
    """A saga of one to four steps with random dependencies, maybe ending in a pivot."""
    count = draw(st.integers(1, 4))
    steps = []
    for index in range(count):
        kind = draw(st.sampled_from(KINDS))
        earlier = draw(st.sets(st.integers(0, index - 1), max_size=2)) if index else set()
        ttl = draw(st.sampled_from([None, 300.0, 600.0, 900.0])) if kind == "pay" else None
        undo_ask = draw(st.booleans()) if kind in _UNDO else False
        steps.append(StepShape(kind, tuple(sorted(earlier)), ttl, undo_ask))
    return SagaShape(tuple(steps), draw(st.booleans()))


def step_id(index: int) -> str:
    return f"s{index}"


def definition_of(shape: SagaShape) -> SagaDefinition:
    """The saga definition a shape stands for (validated by the fleet on registration)."""
    steps: list[dict[str, Any]] = []
    for index, step in enumerate(shape.steps):
        sid = step_id(index)
        args: dict[str, Any] = {"step": sid}
        if step.kind == "hold":
            args["item"] = "${input.item}"
        elif step.kind == "note":
            args["text"] = "${input.item}"
        elif step.kind == "pay":
            args["amount"] = "${input.amount}"
        entry: dict[str, Any] = {
            "id": sid, "tool": _TOOL[step.kind], "semantics": CATALOGUE.require(
                _TOOL[step.kind], 1).semantics, "args": args,
            "depends_on": [step_id(d) for d in step.depends_on], "retry": RETRY}
        if step.kind in _UNDO:
            entry["compensation"] = {"tool": _UNDO[step.kind],
                                     "args": {"step": sid, "id": "${receipt.resource_id}"},
                                     "retry": RETRY}
            if step.undo_needs_approval:
                entry["compensation"]["approval"] = {"required": True, "request_ttl_s": 400}
        if step.request_ttl_s is not None:
            entry["approval"] = {"above": {"arg": "amount", "limit": GATE_LIMIT},
                                 "request_ttl_s": step.request_ttl_s}
        steps.append(entry)
    if shape.pivot:
        steps.append({"id": "send", "tool": "mail.send", "semantics": "irreversible",
                      "pivot": True, "depends_on": [step_id(i) for i in range(len(shape.steps))],
                      "args": {"step": "send", "to": "${input.item}"}, "retry": RETRY})
    return SagaDefinition.model_validate({
        "name": "shaped", "version": 1, "retry_budget": 10,
        "input": {"item": {"type": "string", "min_length": 1},
                  "amount": {"type": "number", "minimum": 0}},
        "steps": steps})


def shaped_tools(fleet_clock: Any = None) -> InMemoryTools:
    """In-memory implementations of every catalogue tool: each new effect gets a counter id."""
    tools = InMemoryTools(CATALOGUE, fleet_clock)
    counter = iter(range(1, 1_000_000))

    def effect(prefix: str) -> Any:
        def perform(args: Mapping[str, Any], key: str) -> Receipt:
            fields = {"step": args["step"]}
            if "amount" in args:
                fields["amount"] = args["amount"]
            return Receipt(resource_id=f"{prefix}-{next(counter)}", version=1, fields=fields)
        return perform

    for spec in CATALOGUE.tools:
        tools.add(spec.name, effect(spec.name))
    return tools


#: The faults a call may meet (a worker's death has a rule of its own: it matters most).
FAULTS = (Fault.FAIL_BEFORE_COMMIT, Fault.TIMEOUT_BEFORE_DISPATCH, Fault.COMMIT_THEN_TIMEOUT,
          Fault.SLOW_VISIBILITY, Fault.BUSINESS_REJECTION, Fault.LOOKUP_UNAVAILABLE,
          Fault.SLOW_ANSWER, Fault.COMPENSATION_FAILURE)
#: The tools a repeated call would do twice: where a worker's death matters most.
UNDEDUPED = tuple(t.name for t in CATALOGUE.tools if not t.dedupes_by_key)
#: Whichever tool is called next, most of the time; a named one otherwise.
FAULTED_TOOLS = (ANY_TOOL, ANY_TOOL, ANY_TOOL, *(t.name for t in CATALOGUE.tools))
#: Clock jumps that sit on and around the leases, horizons, backoffs and TTLs above.
JUMPS = (1, 5, 19, 20, 21, 29, 30, 31, 40, 45, 60, 61, 120, 300, 400, 600, 900, 3600)
#: Runs whose effect may exist or whose work may still come: none of these once finished.
#: (An absent one waits too, until its lookup came after the commit horizon: only then can
#: it no longer commit late.)
WAITING = frozenset({RunStatus.SCHEDULED, RunStatus.STARTED, RunStatus.AWAITING_APPROVAL,
                     RunStatus.UNKNOWN, RunStatus.RECONCILING, RunStatus.FOUND,
                     RunStatus.VERIFYING, RunStatus.RETRY_REQUESTED})
#: The run status each step event leaves behind, judged apart from the fold.
AFTER_EVENT: dict[type[SagaEvent], RunStatus] = {
    StepScheduled: RunStatus.SCHEDULED, StepStarted: RunStatus.STARTED,
    StepSucceeded: RunStatus.SUCCEEDED, StepFailed: RunStatus.FAILED,
    StepOutcomeUnknown: RunStatus.UNKNOWN, ApprovalRequested: RunStatus.AWAITING_APPROVAL,
    ApprovalDenied: RunStatus.DENIED,
}


class CorePromise(RuleBasedStateMachine):
    """Interleaved worker, broker, sweeper, clock and person moves over generated sagas."""

    def __init__(self) -> None:
        super().__init__()
        self.fleet: TestFleet | None = None
        self.tools: InMemoryTools | None = None
        self.shape: SagaShape | None = None
        self.sagas: dict[str, float] = {}  # saga id -> its amount

    # -- the world

    @initialize(shape=saga_shapes(),
                amounts=st.lists(st.sampled_from([50, GATE_LIMIT - 1, GATE_LIMIT,
                                                  GATE_LIMIT + 1, 5000]),
                                 min_size=1, max_size=2),
                inline=st.sampled_from([1, 2, 8]))
    def start(self, shape: SagaShape, amounts: list[int], inline: int) -> None:
        self.shape = shape
        self.tools = shaped_tools()
        # Few steps per message: finer interleavings (8 is a real worker's default).
        self.fleet = TestFleet([definition_of(shape)], self.tools, lease_s=LEASE_S,
                               inline_steps=inline)
        self.approver = self.fleet.person("ada")
        client = self.fleet.client(actor="agent")
        for number, amount in enumerate(amounts):
            started = client.start("shaped", {"item": "it@example.com", "amount": amount},
                                   key=f"saga-{number}")
            self.sagas[started.saga_id] = amount

    @property
    def world(self) -> tuple[TestFleet, InMemoryTools]:
        assert self.fleet is not None and self.tools is not None  # set by @initialize
        return self.fleet, self.tools

    # -- moves

    # Preconditions keep each move to the moments it can matter: a rule that cannot act
    # is not drawn, so the moves that can are drawn more often.

    @precondition(lambda self: self._queued())
    @rule()
    def a_worker_handles_one_message(self) -> None:
        self.world[0].run_next()

    @precondition(lambda self: self._queued())
    @rule()
    def workers_drain_the_queue(self) -> None:
        self.world[0].run_until_idle()

    @precondition(lambda self: self._queued())
    @rule()
    def the_broker_loses_every_queued_message(self) -> None:
        self.world[0].publisher.drop_pending()

    @precondition(lambda self: self.fleet is not None and self.fleet.publisher.published)
    @rule(pick=st.integers(0, 1000))
    def an_old_message_is_delivered_again(self, pick: int) -> None:
        fleet = self.world[0]
        published = fleet.publisher.published
        fleet.publisher.publish([published[pick % len(published)]])

    @rule(pick=st.integers(0, 1000), in_flight=st.booleans(), handled=st.booleans())
    def a_stale_wake_up_arrives_for_any_operation(self, pick: int, in_flight: bool,
                                                  handled: bool) -> None:
        # A message carries only (saga, step, kind, attempt): a duplicate, late or
        # reordered one may name any operation the log knows, at any moment (most to the
        # point: one a worker holds, or held until it died).
        fleet = self.world[0]
        runs = [(saga_id, run) for saga_id in self.sagas for run in _runs(fleet.state(saga_id))]
        started = [(saga_id, run) for saga_id, run in runs if run.status is RunStatus.STARTED]
        pool = started if in_flight and started else runs
        saga_id, run = pool[pick % len(pool)]
        fleet.publisher.publish([StepCommand(saga_id=saga_id, step_id=run.step_id,
                                             kind=run.kind, attempt=max(run.attempt, 1))])
        if handled:  # and the workers handle it (with whatever was queued before it)
            fleet.run_until_idle()

    @rule()
    def the_sweeper_passes(self) -> None:
        self.world[0].sweep()

    @rule(after_commit=st.booleans(), tool=st.sampled_from([ANY_TOOL, *UNDEDUPED]))
    def the_next_worker_dies_mid_call(self, after_commit: bool, tool: str) -> None:
        self.world[1].fail_next(tool, Fault.WORKER_CRASH_AFTER_COMMIT if after_commit
                                else Fault.WORKER_CRASH_BEFORE_CALL)

    @rule()
    def the_next_forward_call_is_refused(self) -> None:
        # The usual way into compensation besides a cancel (a refused compensation
        # stops for a person).
        self.world[1].fail_next(ANY_TOOL, Fault.BUSINESS_REJECTION)

    @rule(after_commit=st.booleans(), tool=st.sampled_from([ANY_TOOL, *UNDEDUPED]),
          redelivered=st.booleans())
    def a_worker_dies_and_its_lease_runs_out_unnoticed(self, after_commit: bool, tool: str,
                                                       redelivered: bool) -> None:
        fleet = self.world[0]
        crashed = len(fleet.crashed)
        self.the_next_worker_dies_mid_call(after_commit, tool)
        fleet.run_until_idle()
        fleet.clock.advance(LEASE_S)  # the lease ends now: no sweeper has seen it yet
        if redelivered:
            # A broker that acknowledges late hands a dead worker's message to another
            # worker once its visibility timeout passes, whatever the log says.
            fleet.publisher.publish(fleet.crashed[crashed:])
            fleet.run_until_idle()

    @rule(fault=st.sampled_from(FAULTS), tool=st.sampled_from(FAULTED_TOOLS),
          delay=st.sampled_from([5.0, 15.0, 35.0, 100.0]))
    def a_fault_is_armed(self, fault: Fault, tool: str, delay: float) -> None:
        params: dict[str, Any] = {}
        if fault is Fault.SLOW_VISIBILITY:
            # A provider shows a commit before its commit horizon ends (its promise).
            params["delay_s"] = min(delay, 15.0)
        elif fault is Fault.SLOW_ANSWER:
            params["delay_s"] = delay
        self.world[1].fail_next(tool, fault, **params)

    @rule(seconds=st.sampled_from(JUMPS))
    def the_clock_jumps_unnoticed(self, seconds: int) -> None:
        self.world[0].clock.advance(seconds)

    @rule(seconds=st.sampled_from(JUMPS))
    def time_passes_with_the_fleet_awake(self, seconds: int) -> None:
        self.world[0].advance(seconds)

    @precondition(lambda self: self._open_requests())
    @rule(pick=st.integers(0, 1000))
    def a_person_grants_an_open_request(self, pick: int) -> None:
        self.a_person_answers_an_open_request(pick, grant=True)

    @precondition(lambda self: self._open_requests())
    @rule(pick=st.integers(0, 1000))
    def a_person_denies_an_open_request(self, pick: int) -> None:
        self.a_person_answers_an_open_request(pick, grant=False)

    @precondition(lambda self: any(run.kind is COMPENSATION for _, run in self._open_requests()))
    @rule(pick=st.integers(0, 1000), grant=st.booleans())
    def a_person_answers_a_request_to_undo(self, pick: int, grant: bool) -> None:
        # An undo's request is rarer than a payment's and matters as much: its own move.
        undo = [(saga_id, run) for saga_id, run in self._open_requests()
                if run.kind is COMPENSATION]
        saga_id, run = undo[pick % len(undo)]
        self._answer(saga_id, run, grant)

    def _queued(self) -> bool:
        return self.fleet is not None and len(self.fleet.publisher) > 0

    def _open_requests(self) -> list[tuple[str, Any]]:
        if self.fleet is None:
            return []
        return [(saga_id, run) for saga_id in self.sagas
                for run in _runs(self.fleet.state(saga_id))
                if run.status is RunStatus.AWAITING_APPROVAL and run.approval
                and run.approval.status == "requested"]

    def _cancellable(self) -> list[str]:
        if self.fleet is None:
            return []
        return [saga_id for saga_id in self.sagas
                if (state := self.fleet.state(saga_id)).finished is None
                and not state.cancel_requested]

    def a_person_answers_an_open_request(self, pick: int, *, grant: bool) -> None:
        open_requests = self._open_requests()
        saga_id, run = open_requests[pick % len(open_requests)]
        self._answer(saga_id, run, grant)

    def _answer(self, saga_id: str, run: Any, grant: bool) -> None:
        try:
            if grant:
                self.approver.approve(saga_id, run.step_id, kind=run.kind)
            else:
                self.approver.deny(saga_id, run.step_id, kind=run.kind, reason="no")
        except SagaError:
            pass  # refused as a person's late or stale click is (an expired request)

    @precondition(lambda self: self._cancellable())
    @rule(pick=st.integers(0, 1))
    def the_agent_cancels(self, pick: int) -> None:
        cancellable = self._cancellable()
        saga_id = cancellable[pick % len(cancellable)]
        self.world[0].client(actor="agent").cancel(saga_id, reason="changed plans")

    # -- invariants

    @invariant()
    def no_second_call_without_a_lookup_past_the_horizon(self) -> None:
        if self.tools is None:
            return
        for problem in second_calls(self.tools):
            raise AssertionError(problem)

    @invariant()
    def no_duplicate_net_effect(self) -> None:
        if self.tools is None:
            return
        assert self.tools.duplicate_effects() == [], self.tools.duplicate_effects()
        per_step: dict[tuple[str | None, str, str], list[str]] = {}
        for effect in self.tools.effects:
            step = str(effect.receipt.fields.get("step"))
            per_step.setdefault((effect.saga_id, step, effect.tool), []).append(effect.key)
        repeated = {k: keys for k, keys in per_step.items() if len(keys) > 1}
        assert not repeated, f"one step's operation committed more than once: {repeated}"

    @invariant()
    def every_saga_keeps_its_promises(self) -> None:
        if self.fleet is None:
            return
        for saga_id, amount in self.sagas.items():
            events = self.fleet.events(saga_id)
            state = self.fleet.state(saga_id)
            check_fold(state, events)
            check_compensation_order(state.definition, events)
            check_gates(events, self.shape_of(), amount)
            check_terminal(state, self.fleet.clock())

    def shape_of(self) -> SagaShape:
        assert self.shape is not None
        return self.shape

    def teardown(self) -> None:
        fleet = self.fleet
        if fleet is None:
            return
        self.world[1].clear_faults()
        for _ in range(6):  # approvals run out and are asked again, then escalate
            fleet.advance(3600)
        for saga_id in self.sagas:
            state = fleet.state(saga_id)
            assert state.finished is not None or state.escalation is not None, (
                f"saga {saga_id} stalled: {state.status}, runs "
                f"{[(r.step_id, r.kind.value, r.status.value) for r in _runs(state)]}")
        self.every_saga_keeps_its_promises()
        self.no_second_call_without_a_lookup_past_the_horizon()
        self.no_duplicate_net_effect()


def _runs(state: SagaState) -> list[Any]:
    return [*state.forward.values(), *state.compensation.values()]


def second_calls(tools: InMemoryTools) -> list[str]:
    """Every second call of a non-deduplicating tool's key after a call that may have
    committed, with no lookup in between that answered absent past the commit horizon."""
    problems = []
    last: dict[tuple[str, str], Any] = {}  # (tool, key) -> the call that may have committed
    cleared: set[tuple[str, str]] = set()
    for call in tools.calls:
        spec = tools.catalogue.require(call.tool, 1)
        if spec.dedupes_by_key:
            continue
        ident = (call.tool, call.key)
        if call.op == "lookup":
            previous = last.get(ident)
            horizon = timedelta(seconds=spec.commit_horizon_s or 0)
            if (previous is not None and call.outcome == "absent"
                    and call.at >= previous.at + horizon):
                cleared.add(ident)
            continue
        if ident in last and ident not in cleared:
            first = last[ident]
            problems.append(f"{call.tool} called again with key {call.key[:12]} at {call.at}"
                            f" after a call at {first.at} that ended {first.outcome!r},"
                            " with no lookup past the commit horizon in between")
        if call.outcome == "refused":
            continue  # a definite refusal committed nothing: the next call is a first one
        last[ident] = call
        cleared.discard(ident)
    return problems


def check_fold(state: SagaState, events: list[SagaEvent]) -> None:
    """The loaded state is the fold of the events, and each run's status is the one its last
    step event leaves (where that event alone decides it)."""
    refolded = fold(state.definition, events)
    assert refolded == state, "the loaded state differs from the fold of its events"
    last: dict[tuple[str, StepKind], SagaEvent] = {}
    for event in events:
        step, kind = getattr(event, "step_id", None), getattr(event, "kind", None)
        if isinstance(step, str) and isinstance(kind, StepKind):
            last[(step, kind)] = event
    for (step, kind), event in last.items():
        runs = state.forward if kind is FORWARD else state.compensation
        expected = AFTER_EVENT.get(type(event))
        if expected is None or step not in runs:
            continue
        status = runs[step].status
        if expected is RunStatus.SUCCEEDED and status is RunStatus.VERIFYING:
            continue  # a receipt that waits for its postcondition (none declared here)
        if status is RunStatus.WITHDRAWN and expected in (RunStatus.SCHEDULED,
                                                          RunStatus.AWAITING_APPROVAL):
            continue  # the saga stopped waiting for it (compensating or finished)
        assert status is expected, (
            f"{step} {kind.value}: last event {type(event).__name__}, but the fold says "
            f"{status.value}")


def check_compensation_order(definition: SagaDefinition, events: list[SagaEvent]) -> None:
    """Each compensation starts only after every dependent step that may have an effect
    was undone, and none starts once the pivot succeeded."""
    pivots = {s.id for s in definition.steps if s.pivot}
    pivot_passed = False
    for index, event in enumerate(events):
        if isinstance(event, StepSucceeded) and event.kind is FORWARD and event.step_id in pivots:
            pivot_passed = True
        if not (isinstance(event, StepStarted) and event.kind is COMPENSATION):
            continue
        assert not pivot_passed, f"compensation of {event.step_id} started past the pivot"
        before = fold(definition, events[:index])
        for later in definition.descendants(event.step_id):
            forward = before.forward[later].status
            undo = before.compensation.get(later)
            if forward in (RunStatus.SUCCEEDED, RunStatus.FORCED) and undo is not None:
                assert undo.status in (RunStatus.SUCCEEDED, RunStatus.FORCED,
                                       RunStatus.SKIPPED), (
                    f"{event.step_id} undone while its dependent {later} is not"
                    f" ({undo.status.value})")
            assert forward not in (RunStatus.STARTED, RunStatus.UNKNOWN,
                                   RunStatus.RECONCILING, RunStatus.FOUND), (
                f"{event.step_id} undone while its dependent {later} is in doubt"
                f" ({forward.value})")


def check_gates(events: list[SagaEvent], shape: SagaShape, amount: float) -> None:
    """A payment asks a person exactly above the limit, for the shorter TTL; a gated
    operation starts only with a grant; a denied request is never awaiting."""
    steps = {step_id(i): step for i, step in enumerate(shape.steps)}
    granted: set[tuple[str, StepKind]] = set()
    for event in events:
        if isinstance(event, ApprovalRequested):
            step = steps.get(event.step_id)
            assert step is not None, f"{event.step_id} asked a person but has no gate"
            if event.kind is FORWARD:
                assert step.kind == "pay", f"{event.step_id} ({step.kind}) asked a person"
                assert amount > GATE_LIMIT, (
                    f"{event.step_id} asked a person for {amount}, not above {GATE_LIMIT}")
                ttl = min(GATE_REQUEST_TTL_S, step.request_ttl_s or GATE_REQUEST_TTL_S)
            else:
                assert step.undo_needs_approval, f"{event.step_id}'s undo asked a person"
                ttl = 400.0
            assert event.expires_at == event.at + timedelta(seconds=ttl), (
                f"{event.step_id} request open for {event.expires_at - event.at}, not {ttl} s")
        elif isinstance(event, ApprovalGranted):
            granted.add((event.step_id, event.kind))
        elif isinstance(event, StepStarted) and event.step_id in steps:
            step = steps[event.step_id]
            needs = (step.kind == "pay" and amount > GATE_LIMIT if event.kind is FORWARD
                     else step.undo_needs_approval)
            assert not needs or (event.step_id, event.kind) in granted, (
                f"{event.step_id} {event.kind.value} started without a grant")


def check_terminal(state: SagaState, now: datetime) -> None:
    """A finished saga has no run waiting and nothing due; nothing denied is awaiting."""
    for run in _runs(state):
        if run.approval is not None and run.approval.status == "denied":
            assert run.status is not RunStatus.AWAITING_APPROVAL, (
                f"{run.step_id} {run.kind.value} denied, yet awaiting approval")
    if state.finished is None:
        return
    waiting = [(r.step_id, r.kind.value, r.status.value) for r in _runs(state)
               if r.status in WAITING or (r.status is RunStatus.ABSENT
                                          and not _absent_past_horizon(state, r))]
    assert not waiting, f"finished ({state.finished}) with runs waiting: {waiting}"
    assert due_work(state, now, timedelta(0)) == [], "finished, yet work is due"
    assert decide(state, now) == [], "finished, yet decide wants more"


def _absent_past_horizon(state: SagaState, run: Any) -> bool:
    """Whether a lookup answered absent after the operation's commit horizon ended."""
    tool, version = state.definition.tool_for(run.step_id, run.kind)
    horizon = CATALOGUE.require(tool, version).commit_horizon_s
    return (horizon is not None and run.unknown_at is not None and run.absent_at is not None
            and run.absent_at >= run.unknown_at + timedelta(seconds=horizon))
