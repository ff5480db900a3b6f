"""In-memory tools with the promises of a real provider, and faults a test can inject.

An :class:`InMemoryTool` wraps an *effect* (a plain function ``(args, key) -> Receipt``
that changes some in-memory books and raises :class:`~workers.tools.ToolError` for a
refusal) with what a provider with idempotency keys does around it, in the same order as
the sandbox providers (``sagafleet/sandbox/provider.py``)::

    [worker_crash_before_call] → [timeout_before_dispatch] → [fail_before_commit]
      → known key (and the tool dedupes): replay the stored receipt, or refuse a changed payload
      → new key: [business_rejection | compensation_failure | target_changed]
                 → the effect; the receipt is stored under the key ([slow_visibility])
      → [commit_then_timeout] → [worker_crash_after_commit] → [slow_answer]

``lookup(key)`` answers from the stored receipts: the receipt, ``Absent`` (never stored, or
not visible yet) or ``Unknown`` (``lookup_unavailable``). Whether a tool dedupes by key is
read from the catalogue, the one place that says it.

Faults are armed on an :class:`InMemoryTools` set with :meth:`InMemoryTools.fail_next` and
use the sandbox's names (:class:`Fault`), so a scenario reads the same on both; a fault
armed on :data:`ANY_TOOL` fires on whichever tool is called next. Every ``execute`` and
``lookup`` is kept, in order, in :attr:`InMemoryTools.calls` (a :class:`ToolCall` each, with
its operation key and how it ended), for checks such as "never called twice without a
lookup in between".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from saga_core.contracts import ErrorClass, Receipt
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.errors import SagaError
from sagafleet.testing.clock import TestClock
from workers.tools import Absent, LookupResult, ToolError, ToolRegistry, ToolSet, Unknown

__all__ = [
    "ANY_TOOL",
    "CommittedEffect",
    "Effect",
    "Fault",
    "InMemoryTool",
    "InMemoryTools",
    "TargetChange",
    "ToolCall",
    "UnknownFault",
    "WorkerCrashed",
]

#: Performs one new effect under ``key`` and returns its receipt; raises ToolError to refuse.
Effect = Callable[[Mapping[str, Any], str], Receipt]
#: "Someone else" edits the target a compensation is about to act on (``target_changed``).
TargetChange = Callable[[Mapping[str, Any]], None]

#: How long a ``slow_visibility`` effect stays invisible to lookup unless told (as the sandbox).
DEFAULT_VISIBILITY_DELAY_S = 2.0
#: How long a ``slow_answer`` call takes unless told: past every commit horizon and lease
#: of the shipped catalogues.
DEFAULT_SLOW_ANSWER_S = 600.0
#: Arm a fault on whichever tool of the set is called next (``fail_next(ANY_TOOL, ...)``).
ANY_TOOL = "*"


class Fault(StrEnum):
    """Where a call fails; the same names as the sandbox's ``Boundary``."""

    FAIL_BEFORE_COMMIT = "fail_before_commit"  # nothing committed; Transient (or error_class=)
    TIMEOUT_BEFORE_DISPATCH = "timeout_before_dispatch"  # nothing committed; caller times out
    COMMIT_THEN_TIMEOUT = "commit_then_timeout"  # effect committed; response lost
    SLOW_VISIBILITY = "slow_visibility"  # committed; lookup sees it after delay_s
    BUSINESS_REJECTION = "business_rejection"  # sold out / declined: a BusinessRejection
    COMPENSATION_FAILURE = "compensation_failure"  # Transient, or error_class="permanent"
    TARGET_CHANGED = "target_changed"  # someone else changes the target just before
    LOOKUP_UNAVAILABLE = "lookup_unavailable"  # lookup cannot answer: Unknown
    # The test kit's own: the effect commits, then the worker dies before recording it
    # (the matrix's "before_receipt", a SIGKILL there); the claim's lease must run out.
    WORKER_CRASH_AFTER_COMMIT = "worker_crash_after_commit"
    # The worker dies after its claim, before the call leaves it: nothing committed, but
    # the log cannot tell, so the claim's lease must run out and the outcome be proven.
    WORKER_CRASH_BEFORE_CALL = "worker_crash_before_call"
    # The effect commits and the answer comes back ``delay_s`` later (the test clock moves
    # on meanwhile): after the lease and the commit horizon, as from a stalled worker.
    SLOW_ANSWER = "slow_answer"


class WorkerCrashed(BaseException):  # noqa: N818 - a crash, not an error to handle
    """The worker running the call died (``worker_crash_after_commit``).

    A BaseException, so no ``except Exception`` in the executor records anything: as after
    a SIGKILL, the claim stays in the log with its lease and the effect stays committed.
    """


class UnknownFault(SagaError):
    """A fault was armed on a tool the set does not have, or one the tool cannot suffer."""


@dataclass
class _Rule:
    """One armed fault: how many more times it fires (None: every time), for which saga."""

    tool: str
    fault: Fault
    remaining: int | None
    saga_id: str | None
    params: dict[str, Any]


CallOutcome = Literal["committed", "replayed", "refused", "ambiguous", "crashed",
                     "found", "absent", "unknown"]


@dataclass(frozen=True)
class ToolCall:
    """One call a tool received, in order: ``execute`` or ``lookup``, under which key, at
    which test time, and how it ended (``refused``: a definite error, nothing committed;
    ``ambiguous``: a timeout; ``crashed``: the worker died; a lookup's answer)."""

    tool: str
    op: Literal["execute", "lookup"]
    key: str
    saga_id: str | None
    at: datetime
    outcome: CallOutcome


@dataclass(frozen=True)
class CommittedEffect:
    """One effect a tool committed (a replayed key adds none): for "no duplicate" checks."""

    tool: str
    key: str
    saga_id: str | None
    receipt: Receipt


@dataclass(frozen=True)
class _Stored:
    """What the provider keeps under an idempotency key."""

    digest: str
    saga_id: str | None
    receipt: Receipt
    visible_at: datetime


def request_digest(args: Mapping[str, Any]) -> str:
    """Canonical hash of a request's arguments: a reused key must bring the same."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class InMemoryTool:
    """One allowlisted tool over in-memory books; implements ``execute`` and ``lookup``."""

    def __init__(
        self,
        name: str,
        version: int,
        effect: Effect,
        *,
        tools: InMemoryTools,
        dedupes_by_key: bool,
        change_target: TargetChange | None = None,
    ) -> None:
        # name and version are how the registry allowlists the tool; what it promises
        # (dedupe, commit horizon, receipt fields) is the catalogue's to say.
        self.name = name
        self.version = version
        self._effect = effect
        self._tools = tools
        self._dedupes = dedupes_by_key
        self._change_target = change_target
        self._stored: dict[str, _Stored] = {}

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Perform the effect once per key (if the tool dedupes), meeting armed faults; the
        call is kept in :attr:`InMemoryTools.calls` with how it ended."""
        saga_id = _saga_of(args)
        at = self._tools.clock()
        outcome: CallOutcome = "crashed"  # a BaseException leaves it so
        try:
            receipt, outcome = self._execute(args, key, saga_id)
            return receipt
        except ToolError as error:
            outcome = "ambiguous" if error.error_class is ErrorClass.AMBIGUOUS else "refused"
            raise
        finally:
            self._tools.calls.append(ToolCall(self.name, "execute", key, saga_id, at, outcome))

    def _execute(self, args: Mapping[str, Any], key: str,
                 saga_id: str | None) -> tuple[Receipt, CallOutcome]:
        fire = self._tools.fire
        if fire(self.name, Fault.WORKER_CRASH_BEFORE_CALL, saga_id) is not None:
            raise WorkerCrashed(f"the worker died before calling {self.name} with key {key!r}")
        if fire(self.name, Fault.TIMEOUT_BEFORE_DISPATCH, saga_id) is not None:
            raise self._timeout(key, "before dispatch")
        failed = fire(self.name, Fault.FAIL_BEFORE_COMMIT, saga_id)
        if failed is not None:
            raise ToolError(error_class(failed.get("error_class", ErrorClass.TRANSIENT)),
                            f"{self.name} failed before commit (injected)", {"key": key})
        digest = request_digest(args)
        stored = self._stored.get(key)
        if stored is not None and self._dedupes:
            if stored.digest != digest:
                raise ToolError(ErrorClass.PERMANENT,
                                f"{self.name}: idempotency key {key!r} was already used for a"
                                " different request", {"key": key})
            receipt = stored.receipt  # the provider replays the stored result
            outcome: CallOutcome = "replayed"
        else:
            outcome = "committed"
            self._shape_new_effect(args, saga_id)
            slow = fire(self.name, Fault.SLOW_VISIBILITY, saga_id)
            receipt = self._effect(args, key)
            self._tools.effects.append(CommittedEffect(self.name, key, saga_id, receipt))
            if stored is None:  # without dedupe a repeat is a new effect; lookup finds the first
                delay = 0.0 if slow is None else float(slow.get("delay_s",
                                                                DEFAULT_VISIBILITY_DELAY_S))
                self._stored[key] = _Stored(digest, saga_id, receipt,
                                            self._tools.clock() + timedelta(seconds=delay))
        if fire(self.name, Fault.COMMIT_THEN_TIMEOUT, saga_id) is not None:
            raise self._timeout(key, "after commit")
        if fire(self.name, Fault.WORKER_CRASH_AFTER_COMMIT, saga_id) is not None:
            raise WorkerCrashed(f"the worker died after {self.name} committed key {key!r}")
        slow = fire(self.name, Fault.SLOW_ANSWER, saga_id)
        if slow is not None:
            self._tools.clock.advance(float(slow.get("delay_s", DEFAULT_SLOW_ANSWER_S)))
        return receipt, outcome

    def lookup(self, key: str) -> LookupResult:
        """The receipt stored under ``key`` once visible; Absent before; Unknown if down."""
        stored = self._stored.get(key)
        saga_id = stored.saga_id if stored is not None else None
        now = self._tools.clock()
        answer: LookupResult
        if self._tools.fire(self.name, Fault.LOOKUP_UNAVAILABLE, saga_id) is not None:
            answer = Unknown(f"{self.name} lookup is unavailable (injected)", {"key": key})
        elif stored is None or now < stored.visible_at:
            answer = Absent(f"{self.name} has no visible request under key {key!r}")
        else:
            answer = stored.receipt
        outcome: CallOutcome = ("unknown" if isinstance(answer, Unknown)
                                else "absent" if isinstance(answer, Absent) else "found")
        self._tools.calls.append(ToolCall(self.name, "lookup", key, saga_id, now, outcome))
        return answer

    def _shape_new_effect(self, args: Mapping[str, Any], saga_id: str | None) -> None:
        """Faults that only a new effect meets (a replay returns the stored result as is)."""
        fire = self._tools.fire
        rejected = fire(self.name, Fault.BUSINESS_REJECTION, saga_id)
        if rejected is not None:
            raise ToolError(ErrorClass.BUSINESS_REJECTION,
                            f"{self.name} rejected the request (injected)")
        failed = fire(self.name, Fault.COMPENSATION_FAILURE, saga_id)
        if failed is not None:
            permanent = error_class(failed.get("error_class", "transient")) is ErrorClass.PERMANENT
            raise ToolError(ErrorClass.PERMANENT if permanent else ErrorClass.TRANSIENT,
                            f"{self.name} was {'refused' if permanent else 'unavailable'}"
                            " (injected)")
        if self._change_target is not None and fire(self.name, Fault.TARGET_CHANGED,
                                                    saga_id) is not None:
            self._change_target(args)

    def _timeout(self, key: str, when: str) -> ToolError:
        return ToolError(ErrorClass.AMBIGUOUS,
                         f"{self.name} timed out {when} (injected); reconcile by key {key!r}",
                         {"key": key})

    @property
    def can_change_target(self) -> bool:
        """Whether ``target_changed`` can be armed on this tool."""
        return self._change_target is not None


def error_class(value: ErrorClass | str) -> ErrorClass:
    """An error class by value (``"Permanent"``) or as the sandbox's params spell it
    (``"permanent"``, ``"business_rejection"``)."""
    if isinstance(value, ErrorClass):
        return value
    wanted = value.replace("_", "").lower()
    for member in ErrorClass:
        if member.value.lower() == wanted:
            return member
    raise UnknownFault(f"no error class {value!r}; known: {[m.value for m in ErrorClass]}")


def _saga_of(args: Mapping[str, Any]) -> str | None:
    # The executor sends the saga id along with every call, as context for the provider.
    saga_id = args.get("saga_id")
    return saga_id if isinstance(saga_id, str) else None


class InMemoryTools:
    """A set of in-memory tools sharing one clock and one list of armed faults."""

    def __init__(self, catalogue: ToolCatalogue, clock: TestClock | None = None) -> None:
        self.catalogue = catalogue
        self.clock = clock or TestClock()  # a TestFleet given these tools runs on this clock
        self.effects: list[CommittedEffect] = []
        self._tools: dict[str, InMemoryTool] = {}
        self._rules: list[_Rule] = []
        self.fired: list[tuple[str, Fault, str | None]] = []  # (tool, fault, saga) as they fired
        self.calls: list[ToolCall] = []  # every execute and lookup, in order

    def add(
        self, name: str, effect: Effect, *, version: int = 1,
        change_target: TargetChange | None = None,
    ) -> InMemoryTool:
        """Implement catalogue tool ``name@version`` with ``effect``; return the tool."""
        spec = self.catalogue.require(name, version)
        tool = InMemoryTool(name, version, effect, tools=self,
                            dedupes_by_key=spec.dedupes_by_key, change_target=change_target)
        self._tools[name] = tool
        return tool

    def tool_set(self) -> ToolSet:
        """The catalogue with these tools registered, as a fleet runs it."""
        registry = ToolRegistry({(tool.name, tool.version): tool for tool in self._tools.values()})
        return ToolSet(self.catalogue, registry)

    def __getitem__(self, name: str) -> InMemoryTool:
        return self._tools[name]

    def __iter__(self) -> Iterator[InMemoryTool]:
        return iter(self._tools.values())

    # -- faults

    def fail_next(
        self, tool: str, fault: Fault | str, times: int | None = 1, *,
        saga_id: str | None = None, **params: Any,
    ) -> None:
        """Make the next ``times`` calls of ``tool`` (None: every call) meet ``fault``.

        ``tool`` may be :data:`ANY_TOOL`: the fault fires on whichever tool meets it first
        (``target_changed`` only where a tool can suffer it). ``saga_id`` narrows it to one
        saga's calls (a lookup knows the saga of a key only once the tool stored it, as the
        sandbox does). Parameters as in the sandbox:
        ``delay_s`` for slow_visibility, ``error_class`` for fail_before_commit and
        compensation_failure (``"permanent"``).
        """
        fault = self._check(tool, fault)
        if times is not None and times < 1:
            raise ValueError(f"times must be at least 1 (or None for always), got {times}")
        self._rules.append(_Rule(tool, fault, times, saga_id, dict(params)))

    def fail_always(self, tool: str, fault: Fault | str, *, saga_id: str | None = None,
                    **params: Any) -> None:
        """Make every call of ``tool`` meet ``fault`` until :meth:`clear_faults`."""
        self.fail_next(tool, fault, None, saga_id=saga_id, **params)

    def clear_faults(self) -> None:
        """Disarm every fault (what already fired stays in :attr:`fired`)."""
        self._rules.clear()

    def _check(self, tool: str, fault: Fault | str) -> Fault:
        if tool not in self._tools and tool != ANY_TOOL:
            raise UnknownFault(f"no in-memory tool {tool!r}; the set has {sorted(self._tools)}")
        try:
            checked = Fault(fault)
        except ValueError:
            raise UnknownFault(
                f"no fault {fault!r}; known faults: {[f.value for f in Fault]}") from None
        if (checked is Fault.TARGET_CHANGED and tool != ANY_TOOL
                and not self._tools[tool].can_change_target):
            raise UnknownFault(f"{tool} has no target to change (add it with change_target=)")
        return checked

    def fire(self, tool: str, fault: Fault, saga_id: str | None) -> dict[str, Any] | None:
        """The parameters of the first armed rule for this call, consuming one firing."""
        for rule in self._rules:
            if rule.fault is not fault or rule.tool not in (tool, ANY_TOOL) or rule.remaining == 0:
                continue
            if rule.saga_id is not None and rule.saga_id != saga_id:
                continue
            if rule.remaining is not None:
                rule.remaining -= 1
            self.fired.append((tool, fault, saga_id))
            return rule.params
        return None

    # -- evidence

    def effects_of(self, tool: str, saga_id: str | None = None) -> list[CommittedEffect]:
        """The effects ``tool`` committed (for one saga), oldest first."""
        return [e for e in self.effects
                if e.tool == tool and (saga_id is None or e.saga_id == saga_id)]

    def duplicate_effects(self) -> list[CommittedEffect]:
        """Effects committed a second time under the same key (only a non-deduping tool can)."""
        seen: set[tuple[str, str]] = set()
        repeats: list[CommittedEffect] = []
        for effect in self.effects:
            if (effect.tool, effect.key) in seen:
                repeats.append(effect)
            seen.add((effect.tool, effect.key))
        return repeats
