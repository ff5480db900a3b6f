"""``SagaClient``: how agents and operators start, watch, approve and cancel sagas.

Every command is recorded as events with the actor; starting is idempotent by key (the
saga id is derived from tenant and key, so a retry lands on the same stream), and a
tenant can never see or touch another tenant's saga.
"""

from __future__ import annotations

import json
import math
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from application.orchestrator import Committed, Orchestrator
from application.publishing import Publisher
from application.secrets.guard import SecretGuard
from application.secrets.inputs import (
    RawSecretRefused,
    SecretRef,
    checked_values,
    raw_secret_problems,
    split_secrets,
)
from application.secrets.placeholders import SecretRefRejected, refs_in
from application.secrets.port import Secrets
from application.seen_versions import check_seen, moved_refusal
from application.telemetry.metrics import WorkerMetrics
from application.telemetry.tracing import saga_start_span, set_outcome, trace_metadata
from application.views import SagaView, view_fields, view_of
from events import ConcurrencyError
from events.definition_store.port import Definitions
from events.saga_log.port import LoadedSaga
from events.saga_log.streams import SagaNotFound
from saga_core import (
    SagaDefinition,
    check_approval,
    check_denial,
    validate_plan,
)
from saga_core.access.roles import Action, Principal, check_permitted
from saga_core.agents.lineage import Lineage, new_trace_id, parse_lineage
from saga_core.agents.plans import AgentPlan, parse_plan
from saga_core.agents.replans import revise_plan
from saga_core.contracts import SagaStatus, StepKind
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.definition import parse_definition
from saga_core.definitions.inputs import validate_input
from saga_core.definitions.validation import validate_definition
from saga_core.engine.dry_run import DryRun, plan_start, start_event
from saga_core.engine.events import CancelRequested, OperatorAction, SagaEvent
from saga_core.engine.resolution import OPERATOR_ACTIONS, OperatorRequest, resolve_escalation
from saga_core.engine.state import SagaState
from saga_core.errors import (
    ApprovalNotPending,
    ErrorKind,
    InputValidationError,
    SagaError,
)
from saga_core.keys import json_value_problem, payload_hash, text_argument_problem, text_problem
from saga_core.limits import (
    EVIDENCE_BYTES,
    KEY_CHARS,
    NAME_CHARS,
    REASON_CHARS,
    SECRET_VALUE_BYTES,
    Limit,
    measure_json,
)

# Saga ids for idempotency keys: uuid5 over (tenant, key) in sagafleet's own namespace.
_KEY_NAMESPACE = uuid.UUID("5a6af1ee-7000-4000-8000-000000000001")
# The lengths of names, keys and reasons, and why: saga_core.limits (NAME_CHARS, ...).
DEFAULT_SECRET_TTL = timedelta(minutes=15)
"""How long a deposited secret waits for its start, unless told otherwise."""
MIN_SECRET_TTL, MAX_SECRET_TTL = timedelta(seconds=1), timedelta(days=1)


def saga_id_for_key(tenant: str, key: str) -> str:
    """The id of the saga ``tenant`` starts (or started) with idempotency ``key``."""
    return str(uuid.uuid5(_KEY_NAMESPACE, f"{tenant}\x00{key}"))


PLAN_NAME_PREFIX = "agent-plan-"
"""Names of definitions made from agent plans that were given no name of their own."""


def plan_definition_name(plan: AgentPlan) -> str:
    """The definition name of a plan given no name: ``agent-plan-`` and 16 hex digits of the
    plan's canonical hash (its content decides it, so a redelivery names it the same)."""
    return f"{PLAN_NAME_PREFIX}{payload_hash(plan.model_dump(mode='json'))[:16]}"


class IdempotencyConflict(SagaError):
    """The idempotency key already started a saga with other input or another definition."""
    kind = ErrorKind.CONFLICT


class InvalidRequest(SagaError):
    """A client call's argument is malformed (not the saga input); the message names it."""
    kind = ErrorKind.INVALID_INPUT


def _seen(seen_version: object, expected_version: object) -> int | None:
    """The saga version the person saw (``application.seen_versions``): ``seen_version``, or
    its old name ``expected_version`` (still accepted, with a DeprecationWarning; it now
    names only an append's precondition). Both given must agree."""
    if expected_version is not None:
        warnings.warn("expected_version= is deprecated here: the version the person saw is "
                      "seen_version=", DeprecationWarning, stacklevel=3)
        if seen_version is not None and seen_version != expected_version:
            raise InvalidRequest(f"seen_version {seen_version!r} and its old name "
                                 f"expected_version {expected_version!r} disagree")
        seen_version = expected_version
    if seen_version is not None and (isinstance(seen_version, bool)
                                     or not isinstance(seen_version, int) or seen_version < 0):
        raise InvalidRequest(
            f"seen_version must be a saga version (an integer >= 0), got {seen_version!r}")
    return seen_version


def _text(what: str, value: object, limit: Limit | int, *, empty: bool = False) -> str:
    """A caller's text argument, or InvalidRequest naming it (see text_argument_problem;
    ``empty`` lets it be empty or blank); a text too long also names the limit."""
    longest = limit.value if isinstance(limit, Limit) else limit
    problem = text_argument_problem(what, value, longest, blank=empty)
    if problem is not None:
        if isinstance(limit, Limit) and isinstance(value, str) and len(value) > longest:
            problem += f" ({limit.name})"
        raise InvalidRequest(problem)
    return cast(str, value)  # a str: text_argument_problem checked


class Resolution(BaseModel):
    """What a resolve recorded (None: a repeated click recorded nothing) and the saga after."""

    model_config = ConfigDict(frozen=True)

    recorded: OperatorAction | None
    saga: SagaView


MAX_WAIT_SECONDS = 3600.0
"""Longest one :meth:`SagaClient.wait` may block (a caller waiting longer calls again)."""
RECHECK_SECONDS = 2.0
"""How often a wait looks again without a wake-up: the store's NOTIFY can be turned off
(``EventStore(notify=False)``), and then this slow re-check is what notices the change."""


class Waited(BaseModel):
    """What :meth:`SagaClient.wait` saw: the saga, and whether it settled before the timeout.

    ``settled``: the saga is terminal or waits for a person (an approval pending, or
    MANUAL_INTERVENTION); False: the timeout ran out first and ``saga`` is where it stood.
    """

    model_config = ConfigDict(frozen=True)

    settled: bool
    saga: SagaView


def waits_for_nobody(view: SagaView) -> bool:
    """Whether the saga is done (terminal) or can go no further without a person: an
    approval is pending or it is in MANUAL_INTERVENTION."""
    return (view.terminal or view.status == SagaStatus.MANUAL_INTERVENTION
            or bool(view.pending_approvals))


class _StaleDefinition(Exception):
    """The cached highest version of a definition is no longer the highest."""


class Started(SagaView):
    """The started (or, for a repeated key, the existing) saga, and whether it was new."""

    created: bool = False


class SagaClient:
    """The command side for agents and operators, bound to one tenant and actor."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        definitions: Definitions,
        catalogue: ToolCatalogue,
        *,
        secrets: Secrets,
        publisher: Publisher,
        principal: Principal,
        refuse_raw_secrets: bool = False,
        guard: SecretGuard | None = None,
    ) -> None:
        """``principal``: who acts (its tenant and name are the saga's tenant and the
        recorded actor). ``refuse_raw_secrets``: this client serves commands that crossed
        the broker, so a secret field must come by ref
        (:class:`~application.secrets.inputs.RawSecretRefused`). ``guard``: looks for a saga's
        secret
        values in what this client records (default: one of its own)."""
        _text("tenant", principal.tenant, NAME_CHARS)
        _text("actor", principal.name, NAME_CHARS)
        self.refuse_raw_secrets = refuse_raw_secrets
        self.orchestrator = orchestrator
        self.definitions = definitions
        self.catalogue = catalogue
        self.secrets = secrets
        self.publisher = publisher
        self.principal = principal
        self.guard = guard if guard is not None else SecretGuard(secrets, WorkerMetrics())

    @property
    def tenant(self) -> str:
        """The tenant this client acts for (its principal's)."""
        return self.principal.tenant

    @property
    def actor(self) -> str:
        """The name events record for what this client does (its principal's)."""
        return self.principal.name

    def for_principal(self, principal: Principal) -> SagaClient:
        """The same client acting as another proven principal."""
        return SagaClient(self.orchestrator, self.definitions, self.catalogue,
                          secrets=self.secrets, publisher=self.publisher,
                          principal=principal, refuse_raw_secrets=self.refuse_raw_secrets,
                          guard=self.guard)

    def as_actor(self, actor: str, tenant: str | None = None) -> SagaClient:
        """The same client acting as another in-process agent (or for another tenant)."""
        # Always an unproven agent: renaming a proven principal would forge its name.
        return self.for_principal(Principal.in_process_agent(tenant or self.tenant, actor))

    def via_broker(self) -> SagaClient:
        """The same client for commands that crossed the broker: the message sat in Redis,
        so a secret field holding a value (not a ref) is refused, naming the field."""
        return SagaClient(self.orchestrator, self.definitions, self.catalogue,
                          secrets=self.secrets, publisher=self.publisher,
                          principal=self.principal, refuse_raw_secrets=True,
                          guard=self.guard)

    # -- secrets ------------------------------------------------------------------------

    def put_secret(self, value: Any, *, ttl: timedelta = DEFAULT_SECRET_TTL) -> SecretRef:
        """Deposit a secret input for this tenant ahead of a start; returns its ref.

        Put ``ref.as_input()`` (``{"$secret_ref": "sr_…"}``) in the secret field of a start's
        input — the only way a secret may cross the broker. The ref is spent by the first
        start that uses it (its value moves to that saga); unused, it expires after ``ttl``
        and the sweeper forgets it. Errors never show the value.
        """
        check_permitted(self.principal, Action.START, "a secret input")
        if not isinstance(ttl, timedelta) or not MIN_SECRET_TTL <= ttl <= MAX_SECRET_TTL:
            raise InvalidRequest(
                f"secret ttl must be a timedelta from {MIN_SECRET_TTL} to {MAX_SECRET_TTL}")
        problem = json_value_problem(value)
        if problem is not None:
            raise InvalidRequest(f"secret value: {problem}")
        try:
            size = len(json.dumps(value).encode("utf-8"))
        except (TypeError, ValueError):
            raise InvalidRequest("secret value must be JSON (text, number, object, ...)") from None
        if size > SECRET_VALUE_BYTES.value:
            raise InvalidRequest(f"secret value is {size} bytes as JSON; at most "
                                 f"{SECRET_VALUE_BYTES.value} are kept (secret_value_bytes)")
        expires_at = self.orchestrator.clock() + ttl
        ref = self.secrets.deposit(self.tenant, value, expires_at)
        return SecretRef(ref=ref, expires_at=expires_at)

    # -- definitions ----------------------------------------------------------------------

    def register_definition(self, definition: SagaDefinition | dict[str, Any]) -> str:
        """Validate a definition against the tool catalogue and store it as this tenant's
        (no other tenant sees it; a name of the shared set is refused); return its hash."""
        check_permitted(self.principal, Action.REGISTER, "a saga definition")
        if not isinstance(definition, SagaDefinition):
            definition = parse_definition(definition)  # size bounded before pydantic copies
        validated = validate_definition(definition, self.catalogue)
        return self.definitions.register(validated, tenant=self.tenant,
                                         registered_by=self.actor)

    def submit_plan(
        self, plan: AgentPlan | dict[str, Any], *, name: str | None = None, version: int = 1
    ) -> SagaDefinition:
        """Validate an agent's plan into an ad-hoc definition and register it.

        Without a ``name`` the definition is named by the plan's content
        (:func:`plan_definition_name`): the same plan submitted again registers nothing new,
        and a different plan never collides with it.
        """
        check_permitted(self.principal, Action.START, "an agent plan")
        if not isinstance(plan, AgentPlan):
            plan = parse_plan(plan)  # size bounded before pydantic copies
        if name is None:
            name = plan_definition_name(plan)
        definition = validate_plan(plan, self.catalogue, name=name, version=version)
        self.definitions.register(definition, tenant=self.tenant, registered_by=self.actor)
        return definition

    def revise_plan(
        self, saga_id: str, plan: AgentPlan | dict[str, Any], *, reason: str = ""
    ) -> SagaView:
        """Record ``plan`` as the next version of the running plan saga ``saga_id`` (the
        agent's replan of the same request), not a new saga: kept actions keep their keys
        and are found, not repeated; dropped ones that ran are compensated; new ones run.
        The same revision again records nothing. ``RevisionRefused`` names why a revision
        cannot apply (the saga ended, or it drops what cannot be undone)."""
        check_permitted(self.principal, Action.START, f"a revision of saga {saga_id}")
        _text("reason", reason, REASON_CHARS, empty=True)
        if not isinstance(plan, AgentPlan):
            plan = parse_plan(plan)  # size bounded before pydantic copies
        for attempt in self.orchestrator.attempts(saga_id, known=self._load(saga_id)):
            with attempt:
                current = attempt.loaded
                given = plan.model_dump(mode="json")
                # A value the saga keeps secret, written into the revised plan itself, is
                # replaced before the plan becomes the recorded definition (its hash with it).
                clean = self.guard.document(given, self.guard.needles(current), "plan")
                kept = plan if clean is given else AgentPlan.model_validate(clean)
                event = revise_plan(current.state, kept, self.catalogue,
                                    self.orchestrator.clock(), actor=self.actor, reason=reason)
                committed = self._write(current, None if event is None else [event], None)
        return self._published(saga_id, committed)

    def revise_plan_for_key(
        self, key: str, plan: AgentPlan | dict[str, Any], *, reason: str = ""
    ) -> SagaView:
        """:meth:`revise_plan` of the saga this tenant started with idempotency ``key`` (the
        agent request the plan answers); ``SagaNotFound`` if there is none."""
        _text("idempotency key", key, KEY_CHARS)
        return self.revise_plan(self._id_for_key(key), plan, reason=reason)

    # -- sagas ------------------------------------------------------------------------------

    def start(
        self,
        definition: str,
        input: dict[str, Any],
        *,
        key: str | None = None,
        version: int | None = None,
        reason: str = "",
        lineage: Lineage | Mapping[str, Any] | None = None,
    ) -> Started:
        """Start a saga; with ``key``, the same key and input return the same saga.

        ``lineage``: who and what asked (agent request id, model name and version, prompt
        or policy version, trace id), recorded on SagaStarted; the trace id, when not
        given, is the OpenTelemetry trace of the start when one traces it, else a new one.
        A repeated key keeps the first start's lineage."""
        self._check_start(definition, key, version, reason)
        asked = parse_lineage(lineage) or Lineage()
        # The highest version is taken from this process's cache and confirmed inside the
        # start's own transaction (no extra round trip); when another process has
        # registered a newer one since, the start runs again on a fresh lookup.
        for cached in (True, False) if version is None else (False,):
            started = self._start_once(definition, version, input, key, reason,
                                       asked=asked, cached=cached)
            if started is not None:
                return started
        raise AssertionError("a start without the cache always decides")  # pragma: no cover

    def _check_start(self, definition: str, key: str | None, version: int | None,
                     reason: str) -> None:
        """A start's (or a dry run's) arguments besides the input, and the right to start."""
        check_permitted(self.principal, Action.START, f"definition {definition!r}")
        if key is not None:
            _text("idempotency key", key, KEY_CHARS)
        _text("definition name", definition, NAME_CHARS)
        _text("reason", reason, REASON_CHARS, empty=True)
        if version is not None and (type(version) is not int or not 1 <= version <= 2**31 - 1):
            raise InvalidRequest(f"definition version must be a positive int, got {version!r}")

    def _checked_input(self, spec: SagaDefinition, input: dict[str, Any]
                       ) -> tuple[dict[str, str], dict[str, Any]]:
        """The input's secret fields given by ref (field: ref), and the rest validated
        (``RawSecretRefused`` first for a secret value that crossed the broker)."""
        refs = refs_in(spec, input)
        if self.refuse_raw_secrets:
            problems = raw_secret_problems(spec, input)
            if problems:
                raise RawSecretRefused(spec.name, problems)
        return refs, validate_input(spec, input, by_ref=refs)

    def _start_once(
        self, definition: str, version: int | None, input: dict[str, Any], key: str | None,
        reason: str, *, asked: Lineage, cached: bool,
    ) -> Started | None:
        """One start on the definition found (None: the cached one was stale, retry).

        Secret fields given by ref are validated once their values are redeemed, inside the
        start's unit of work; the rest before it. The input hash is over the input as the
        log records it (secret fields as placeholders), never over a secret value or ref:
        a repeated key compares equal whether the secret comes as a value, as the same ref
        (already spent by the first start) or as a new one.
        """
        spec = self.definitions.get(definition, version, tenant=self.tenant,
                                    cached_latest=cached)
        try:
            refs, given = self._checked_input(spec, input)
        except InputValidationError:
            if cached:
                return None  # judge the input by the registry's current latest, not a cache
            raise
        recorded, _ = split_secrets(spec, {**given, **dict.fromkeys(refs)})
        saga_id = self._id_for_key(key) if key else str(uuid.uuid4())
        now = self.orchestrator.clock()
        # A new trace per start (OpenTelemetry, when on): the events it appends carry its
        # trace id, and the step messages it publishes carry its context.
        with saga_start_span(saga_id=saga_id, definition=spec.name, tenant=self.tenant,
                             trace_id=asked.trace_id) as span:
            lineage = asked.with_trace(
                trace_metadata().get("trace_id") or new_trace_id())
            fresh = LoadedSaga(saga_id, spec, SagaState.initial(spec), None, 0)
            try:
                # One transaction: the refs spent, the secrets kept and the saga's first events
                # commit together, and version 0 (the stream must not exist) keeps a repeated
                # key from starting twice.
                with self.orchestrator.log.unit_of_work() as unit:
                    still_latest = (
                        self.definitions.send_latest_check(unit, spec, tenant=self.tenant)
                        if cached else None)
                    redeemed = self.secrets.redeem(self.tenant, refs, saga_id, now, unit)
                    normalized = {**given, **checked_values(spec, redeemed)}
                    public, secrets = split_secrets(spec, normalized)
                    started = start_event(spec, saga_id=saga_id, tenant=self.tenant,
                                          public_input=public, key=key, actor=self.actor,
                                          reason=reason, now=now, lineage=lineage)
                    # A secret value given again in an ordinary field, the reason, the key or
                    # the lineage is replaced (the input hash stays the one of what was
                    # given, so a repeated start still compares equal).
                    started = self.guard.events(
                        [started], self.guard.of_values(spec, secrets), "start")[0]
                    self.secrets.keep(saga_id, secrets, unit)
                    committed = self.orchestrator.commit(fresh, [started], actor=self.actor,
                                                         unit=unit)
                    if still_latest is not None and not still_latest():
                        raise _StaleDefinition  # rolls the start back
            except _StaleDefinition:
                set_outcome(span, "stale_definition")
                return None
            except (ConcurrencyError, SecretRefRejected) as exc:
                if cached:
                    return None  # compare a repeated key against the current latest definition
                # A repeated start (a redelivered command, a retry) whose ref the first one
                # spent lands here too: the saga its key names answers it.
                existing = self._started_by_key(key) if key else None
                if existing is None:
                    if isinstance(exc, SecretRefRejected):
                        raise
                    existing = self.orchestrator.log.load(saga_id)
                set_outcome(span, "repeated")
                return self._repeated(key, existing, spec, recorded, None if refs else given)
            self.publisher.publish(committed.wake_ups)  # after the unit committed
            set_outcome(span, "started")
            return Started(**view_fields(committed.loaded), created=True)

    def _started_by_key(self, key: str) -> LoadedSaga | None:
        try:
            return self.orchestrator.log.load(self._id_for_key(key))
        except SagaNotFound:
            return None

    def _repeated(
        self, key: str | None, existing: LoadedSaga, spec: SagaDefinition,
        recorded: dict[str, Any], with_values: dict[str, Any] | None,
    ) -> Started:
        """The saga a repeated key started, if it was started with this input (as the log
        records it) and definition; ``with_values``: the whole input, when no field came
        by ref (sagas started before refs existed hashed it with its secret values)."""
        first = existing.started
        assert first is not None  # a loaded saga has started
        hashes = {payload_hash(recorded)}
        if with_values is not None:
            hashes.add(payload_hash(with_values))
        if first.definition_hash != spec.content_hash() or first.input_hash not in hashes:
            raise IdempotencyConflict(
                f"key {key!r} already started saga {existing.saga_id} with other input or "
                "definition"
            ) from None
        return Started(**view_fields(existing), created=False)

    def dry_run(
        self, definition: str, input: dict[str, Any], *, key: str | None = None,
        version: int | None = None, reason: str = "",
    ) -> DryRun:
        """What :meth:`start` would do with these arguments, writing nothing and calling
        nothing: the same checks (the same typed errors), the same ``SagaStarted``
        (:func:`~saga_core.engine.dry_run.start_event`) folded by the same pure code
        (:func:`~saga_core.engine.dry_run.plan_start`). A secret given by ref is neither read nor
        spent (its field shows the placeholder the log would record); with ``key`` the saga
        id, and so every operation key, is the one the real start will use."""
        self._check_start(definition, key, version, reason)
        spec = self.definitions.get(definition, version, tenant=self.tenant)
        return self._dry_run(spec, input, key, reason)

    def dry_run_plan(
        self, plan: AgentPlan | dict[str, Any], input: dict[str, Any], *,
        name: str | None = None, version: int = 1, key: str | None = None, reason: str = "",
    ) -> DryRun:
        """:meth:`submit_plan` then :meth:`start` as a dry run: the plan is validated into
        the definition it would register (not registered) and its start planned."""
        check_permitted(self.principal, Action.START, "an agent plan")
        plan = plan if isinstance(plan, AgentPlan) else parse_plan(plan)
        name = plan_definition_name(plan) if name is None else name
        self._check_start(name, key, version, reason)
        spec = validate_plan(plan, self.catalogue, name=name, version=version)
        return self._dry_run(spec, input, key, reason)

    def _dry_run(self, spec: SagaDefinition, input: dict[str, Any], key: str | None,
                 reason: str) -> DryRun:
        refs, given = self._checked_input(spec, input)
        public, secrets = split_secrets(spec, {**given, **dict.fromkeys(refs)})
        saga_id = self._id_for_key(key) if key else str(uuid.uuid4())
        started = start_event(spec, saga_id=saga_id, tenant=self.tenant, public_input=public,
                              key=key, actor=self.actor, reason=reason,
                              now=self.orchestrator.clock())
        planned = plan_start(spec, started, saga_id_final=key is not None)
        # What the start would record, as it would record it: a secret value given again
        # in an ordinary field or the reason shows as the marker the log would hold.
        shown = planned.model_dump(mode="json")
        clean = self.guard.document(shown, self.guard.of_values(spec, secrets), "answer")
        return planned if clean is shown else DryRun.model_validate(clean)

    def find(self, key: str) -> SagaView | None:
        """The saga this tenant started with idempotency ``key``, or None."""
        check_permitted(self.principal, Action.READ, "a saga")
        _text("idempotency key", key, KEY_CHARS)
        try:
            return view_of(self._load(self._id_for_key(key)))
        except SagaNotFound:
            return None

    def _id_for_key(self, key: str) -> str:
        # The key decides the stream: a retry, from any process, lands on the same saga.
        return saga_id_for_key(self.tenant, key)

    def status(self, saga_id: str) -> SagaView:
        """The saga's current state and steps, folded from the log."""
        check_permitted(self.principal, Action.READ, f"saga {saga_id}")
        return view_of(self._load(saga_id))

    def wait(self, saga_id: str, timeout: float = 30.0) -> Waited:
        """Block until the saga is terminal or waits for a person, or ``timeout`` seconds
        (0 to :data:`MAX_WAIT_SECONDS`) pass; the saga as it then stands.

        Woken by the log's appends (``SagaLog.watch``, PostgreSQL's NOTIFY), not by a polling
        loop; a slow re-check every :data:`RECHECK_SECONDS` covers a store with NOTIFY off.
        Another tenant's saga is ``SagaNotFound``, as for :meth:`status`.
        """
        check_permitted(self.principal, Action.READ, f"saga {saga_id}")
        if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                or not math.isfinite(timeout) or not 0 <= timeout <= MAX_WAIT_SECONDS):
            raise InvalidRequest(f"wait timeout must be a number of seconds from 0 to "
                                 f"{MAX_WAIT_SECONDS:g}, got {timeout!r}")
        deadline = time.monotonic() + timeout
        view = self.status(saga_id)  # not found: before opening a connection to listen on
        if waits_for_nobody(view):
            return Waited(settled=True, saga=view)
        with self.orchestrator.log.watch() as changes:
            while True:
                # Watching before this look: an append after it still wakes the wait.
                view = self.status(saga_id)
                if waits_for_nobody(view):
                    return Waited(settled=True, saga=view)
                left = deadline - time.monotonic()
                if left <= 0:
                    return Waited(settled=False, saga=view)
                changes.wait(min(left, RECHECK_SECONDS))

    def approve(
        self, saga_id: str, step_id: str, *, kind: StepKind = StepKind.FORWARD,
        action_hash: str | None = None, up_to: float | None = None, reason: str = "",
        seen_version: int | None = None, expected_version: int | None = None,
    ) -> SagaView:
        """Approve the pending request as this client's principal (bound to its action hash,
        up to ``up_to`` of the gate's amount; default the amount requested); a second click
        is a no-op. Only a person of the saga's tenant with the gate's role may approve.
        ``reason`` is recorded on the grant. ``seen_version``: the saga version the
        approver saw (``SagaMoved`` if it moved on: :mod:`application.seen_versions`;
        ``expected_version`` is its deprecated old name)."""
        seen = _seen(seen_version, expected_version)
        kind = _step_ref(step_id, kind)
        if action_hash is not None:
            _text("action hash", action_hash, 64)
        _text("reason", reason, REASON_CHARS, empty=True)
        for attempt in self.orchestrator.attempts(saga_id, known=self._load(saga_id)):
            with attempt:
                current = attempt.loaded
                with moved_refusal(seen, current):
                    wanted = action_hash or _pending_hash(current, step_id, kind)
                    grant = check_approval(current.state, step_id, kind, wanted, self.principal,
                                           self.orchestrator.clock(), up_to=up_to,
                                           reason=reason)
                committed = self._write(current, None if grant is None else [grant], seen)
        return self._published(saga_id, committed)

    def deny(
        self, saga_id: str, step_id: str, *, reason: str, kind: StepKind = StepKind.FORWARD,
        seen_version: int | None = None, expected_version: int | None = None,
    ) -> SagaView:
        """Deny the pending request; before the pivot this starts compensation
        (``seen_version``: as for :meth:`approve`)."""
        seen = _seen(seen_version, expected_version)
        kind = _step_ref(step_id, kind)
        _text("reason", reason, REASON_CHARS, empty=True)
        for attempt in self.orchestrator.attempts(saga_id, known=self._load(saga_id)):
            with attempt:
                current = attempt.loaded
                with moved_refusal(seen, current):
                    current.state.run(step_id, kind)  # an unknown step is refused by name
                    denial = check_denial(current.state, step_id, kind, self.principal,
                                          self.orchestrator.clock(), reason)
                committed = self._write(current, None if denial is None else [denial], seen)
        return self._published(saga_id, committed)

    def cancel(self, saga_id: str, *, reason: str = "", seen_version: int | None = None,
               expected_version: int | None = None) -> SagaView:
        """Ask to cancel: compensate what can be compensated (before the pivot)
        (``seen_version``: as for :meth:`approve`)."""
        seen = _seen(seen_version, expected_version)
        check_permitted(self.principal, Action.CANCEL, f"saga {saga_id}")
        _text("reason", reason, REASON_CHARS, empty=True)
        for attempt in self.orchestrator.attempts(saga_id, known=self._load(saga_id)):
            with attempt:
                current = attempt.loaded
                settled = current.state.cancel_requested or current.state.finished is not None
                asked = CancelRequested(at=self.orchestrator.clock(), actor=self.actor,
                                        reason=reason)
                committed = self._write(current, None if settled else [asked], seen)
        return self._published(saga_id, committed)

    def resolve(
        self, saga_id: str, action: str, *, step_id: str | None = None,
        kind: StepKind = StepKind.FORWARD, reason: str, evidence: dict[str, Any] | None = None,
        seen_version: int | None = None, expected_version: int | None = None,
    ) -> Resolution:
        """Record a typed operator action answering a paused saga (saga_core's resolve rule).

        Returns what was recorded (``None`` for a second click on the same button) and the
        saga after it; raises ``NothingToResolve`` when nothing waits for a person and
        ``OperatorActionRejected`` when the action does not fit what the saga waits on
        (``seen_version``: as for :meth:`approve`).
        """
        seen = _seen(seen_version, expected_version)
        check_permitted(self.principal, Action.RESOLVE, f"saga {saga_id}")
        _text("reason", reason, REASON_CHARS, empty=True)
        if step_id is not None:
            kind = _step_ref(step_id, kind)
        if evidence is not None:
            measure_json("evidence", evidence, EVIDENCE_BYTES)
        problem = None if evidence is None else (
            "must be a JSON object" if not isinstance(evidence, dict)
            else json_value_problem(evidence))
        if problem is not None:
            raise InvalidRequest(f"evidence: {problem}")
        if action not in OPERATOR_ACTIONS:
            raise InvalidRequest(
                f"operator action {action!r} is not one of {list(OPERATOR_ACTIONS)}")
        # Loaded once: the step is checked on it, and the first attempt starts from it.
        loaded = self._load(saga_id)
        if step_id is not None and not loaded.definition.has_step(step_id):
            raise InvalidRequest(f"saga {saga_id} has no step {step_id!r}")
        request = OperatorRequest(action=action, actor=self.actor,
                                  reason=reason, step_id=step_id, kind=kind,
                                  evidence=evidence or {})
        for attempt in self.orchestrator.attempts(saga_id, known=loaded):
            with attempt:
                current = attempt.loaded
                with moved_refusal(seen, current):
                    # A repeated click is told by the last operator action in the whole
                    # history (a load from a snapshot holds none). Read after ``current``: if
                    # the log moved in between, the append at its version loses and this
                    # attempt is followed by another.
                    history = self.orchestrator.log.load_history(saga_id, tenant=self.tenant)
                    recorded = resolve_escalation(current.state, history.events, request,
                                                  self.orchestrator.clock())
                committed = self._write(current, None if recorded is None else [recorded],
                                        seen)
        return Resolution(recorded=recorded, saga=self._published(saga_id, committed))

    def _write(self, current: LoadedSaga, events: Sequence[SagaEvent] | None,
               seen: int | None) -> Committed | None:
        """Commit a person's or an agent's ``events`` on ``current`` as this actor (None:
        nothing to record), unless the saga moved past the version ``seen``."""
        check_seen(seen, current, events)
        if events is None:
            return None
        # What a person or an agent wrote (a reason, evidence, a revised plan) is looked
        # through for the saga's secret values before it is recorded.
        guarded = self.guard.events(events, self.guard.needles(current), "command")
        return self.orchestrator.commit(current, guarded, actor=self.actor)

    def _published(self, saga_id: str, committed: Committed | None) -> SagaView:
        """Publish what the commit made due; the saga as it now stands."""
        if committed is None:
            return self.status(saga_id)
        self.publisher.publish(committed.wake_ups)
        return view_of(committed.loaded)

    def _load(self, saga_id: str) -> LoadedSaga:
        if (not isinstance(saga_id, str) or not 0 < len(saga_id) <= 64
                or text_problem(saga_id) is not None):
            raise SagaNotFound(f"no saga {saga_id!r}")
        return self.orchestrator.log.load(saga_id, tenant=self.tenant)


def _step_ref(step_id: object, kind: object) -> StepKind:
    """A checked step id and its kind (``"forward"`` or ``"compensation"`` as text too)."""
    _text("step id", step_id, NAME_CHARS)
    if isinstance(kind, StepKind):
        return kind
    if isinstance(kind, str) and kind in StepKind._value2member_map_:
        return StepKind(kind)
    raise InvalidRequest(f"step kind must be one of {[k.value for k in StepKind]}, got {kind!r}")


def _pending_hash(loaded: LoadedSaga, step_id: str, kind: StepKind) -> str:
    run = loaded.state.run(step_id, kind)
    if run.approval is None:
        raise ApprovalNotPending(step_id, str(kind), "no approval was requested")
    return run.approval.action_hash

