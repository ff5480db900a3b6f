"""The agent gateway's operations, independent of transport: each call acts as a principal.

Every method takes the :class:`~saga_core.access.roles.Principal` the call acts as (proven by a
token at the MCP server; an in-process agent for a trusted program's function router): its
tenant scopes what the call sees, its name is the actor the log records, and its roles must
allow the operation (:func:`~saga_core.access.roles.check_permitted`: starting, proposing a
plan and depositing a secret are ``start``; cancelling is ``cancel``; the rest ``read``), or
the call is :class:`~saga_core.access.roles.NotPermitted` before anything is done.

The MCP server and the function-calling router both call these methods; they return
JSON-ready dicts or raise typed :class:`~saga_core.errors.SagaError` subclasses, which the
transports turn into structured tool errors. Approving is deliberately absent: approvals
come from people through the operator commands.

Every answer about a saga is looked through for the secret values of each saga it names,
and of the secret fields the call itself gave, before it is returned (the last line of
defence by value, ``application.secrets.guard``: counted at the place ``answer``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from application.client import (
    DEFAULT_SECRET_TTL,
    MAX_SECRET_TTL,
    MIN_SECRET_TTL,
    PLAN_NAME_PREFIX,
    SagaClient,
)
from application.secrets.guard import SecretGuard
from application.secrets.inputs import split_secrets
from saga_core.access.roles import Action, Principal, check_permitted
from saga_core.agents.lineage import FIELDS as LINEAGE_FIELDS
from saga_core.agents.lineage import lineage_problem
from saga_core.agents.plans import AgentPlan, check_plan_document
from saga_core.definitions.definition import SagaDefinition
from saga_core.errors import PlanRejected, Problem
from saga_core.limits import AGENT_REASON_CHARS, KEY_CHARS
from saga_core.secret_scrub import NO_NEEDLES, SecretNeedles
from sagafleet.gateway.describe import describe_definition, outlook, step_semantics
from sagafleet.gateway.errors import ArgumentsRejected, problems_of
from sagafleet.gateway.readable import audit_timeline, compact_status
from workers.fleet import Fleet

# Definitions registered from agent plans; kept out of list_sagas (they are per request,
# and one tenant's plan is no business of another tenant).
MAX_TOOL_WAIT_SECONDS = 60.0
"""Longest one saga_wait call blocks: a tool call holds a request (and a server thread)
open, so an agent that must wait longer calls again."""
DEFAULT_TOOL_WAIT_SECONDS = 30.0


class GatewayService:
    """list_sagas, start_saga, propose_plan, saga_status, saga_wait, saga_audit and cancel_saga."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def _shown(self, answer: dict[str, Any], also: SecretNeedles = NO_NEEDLES
               ) -> dict[str, Any]:
        """``answer`` with the secret values of every saga it names (and ``also``) replaced."""
        guard = self.fleet.secret_guard
        needles = guard.named_in(json.dumps(answer, default=str)) | also
        shown: dict[str, Any] = guard.document(answer, needles, "answer")
        return shown

    def _given(self, spec: SagaDefinition, data: Any) -> SecretNeedles:
        """The needles of the secret fields a call gave (a start's, a dry run's input)."""
        if not isinstance(data, dict):
            return NO_NEEDLES
        return SecretGuard.of_values(spec, split_secrets(spec, data)[1])

    def _client(self, who: Principal, action: Action, what: str) -> SagaClient:
        """A client acting as ``who``, once its roles allow ``action`` on ``what``."""
        check_permitted(who, action, what)
        return self.fleet.client_for(who)

    def registered_definitions(self, tenant: str) -> list[SagaDefinition]:
        """The latest version of each definition ``tenant`` sees (the shared set and its
        own, never another tenant's), agent plans left out."""
        names = sorted({r.name for r in self.fleet.definitions.list(tenant=tenant)
                        if not r.name.startswith(PLAN_NAME_PREFIX)})
        return [self.fleet.definitions.get(name, tenant=tenant) for name in names]

    def list_sagas(self, who: Principal) -> dict[str, Any]:
        """The caller's tenant's definitions and the shared ones (latest version of each),
        with semantics and input schema."""
        check_permitted(who, Action.READ, "the saga definitions")
        return {"tenant": who.tenant,
                "definitions": [describe_definition(d)
                                for d in self.registered_definitions(who.tenant)]}

    def start_saga(
        self, who: Principal, definition: str, input: dict[str, Any],
        idempotency_key: str, reason: str, *, version: int | None = None,
        lineage: dict[str, Any] | None = None, dry_run: bool = False,
    ) -> dict[str, Any]:
        """Validate the input and start the saga; the same key returns the same saga.
        ``lineage``: who and what asks (saga_core.agents.lineage), recorded on the saga. With
        ``dry_run``: what the start would do (graph, resolved arguments, operation keys,
        gates, compensations, budget), nothing written and no tool called."""
        client = self._client(who, Action.START, "a saga")
        problems = _text_problems("idempotency_key", idempotency_key, KEY_CHARS.value)
        problems += _text_problems("reason", reason, AGENT_REASON_CHARS.value)
        if not isinstance(definition, str) or not definition:
            problems.append(Problem("definition", "wrong_type", "a definition name is required"))
        problems += _lineage_problems(lineage)
        problems += _flag_problems("dry_run", dry_run)
        if problems:
            raise ArgumentsRejected("start_saga", problems)
        spec = self.fleet.definitions.get(definition, version, tenant=who.tenant)
        given = self._given(spec, input)
        if dry_run:
            planned = client.dry_run(spec.name, input, key=idempotency_key,
                                     version=spec.version, reason=reason)
            return self._shown({"dry_run": True, **planned.model_dump(mode="json"),
                                "next": "call start_saga again without dry_run to start it"},
                               given)
        started = client.start(spec.name, input, key=idempotency_key,
                               version=spec.version, reason=reason, lineage=lineage)
        loaded = self.fleet.repo.load(started.saga_id, tenant=who.tenant)
        reply = {
            "saga_id": started.saga_id,
            "created": started.created,
            "status": compact_status(started, loaded),
            "what_will_happen": outlook(spec, input),
            "next": "call saga_status with this saga_id to follow it",
        }
        if not started.created:
            reply["note"] = ("this idempotency key already started this saga with the same "
                             "input: nothing new was started")
        return self._shown(reply, given)

    def put_secret(
        self, who: Principal, value: Any,
        ttl_seconds: float = DEFAULT_SECRET_TTL.total_seconds(),
    ) -> dict[str, Any]:
        """Deposit a secret input; returns the ref to send in the secret field instead."""
        client = self._client(who, Action.START, "a secret input")
        low, high = MIN_SECRET_TTL.total_seconds(), MAX_SECRET_TTL.total_seconds()
        if (isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float)
                or not low <= ttl_seconds <= high):
            raise ArgumentsRejected("put_secret", [Problem(
                "ttl_seconds", "out_of_range", f"must be a number from {low:g} to {high:g}")])
        ref = client.put_secret(value, ttl=timedelta(seconds=ttl_seconds))
        return {
            "secret_ref": ref.as_input(),
            "expires_at": ref.expires_at.isoformat(),
            "use": "put secret_ref, as it is, in the secret field of one start's input "
                   "(start_saga here, or a sagafleet.commands.start_saga message); the "
                   "first start spends it",
        }

    def propose_plan(
        self, who: Principal, steps: list[dict[str, Any]], goal: str = "",
        revises: str | None = None, reason: str = "", *,
        dry_run: bool = False, input: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Validate an agent's plan against the catalogue; name the definition to start it.
        With ``revises`` (a running plan saga's id), the plan becomes that saga's next plan
        version at once: actions it keeps are found, not repeated; dropped ones that ran are
        compensated; new ones run. With ``dry_run``: register nothing and show what starting
        it with ``input`` would do."""
        client = self._client(who, Action.START, "a plan")
        problems = _flag_problems("dry_run", dry_run)
        if input is not None and not isinstance(input, dict):
            problems.append(Problem("input", "wrong_type", "the input must be an object"))
        if problems:
            raise ArgumentsRejected("propose_plan", problems)
        document = {"goal": goal, "actions": steps}
        check_plan_document(document)  # bounded before pydantic copies it
        try:
            plan = AgentPlan.model_validate(document)
        except ValidationError as exc:
            raise PlanRejected(_plan_shape_problems(exc)) from None
        if dry_run:
            planned = client.dry_run_plan(plan, input or {})
            return self._shown({"dry_run": True, **planned.model_dump(mode="json"),
                                "next": "call propose_plan again without dry_run to register "
                                        "it"})
        if revises is not None:
            view = client.revise_plan(revises, plan, reason=reason)
            loaded = self.fleet.repo.load(revises, tenant=who.tenant)
            revision = loaded.state.plan_revision
            return self._shown({
                "accepted": True,
                "saga_id": revises,
                "revision": revision,
                "steps": [step_semantics(step) for step in loaded.definition.steps
                          if step.id not in loaded.state.retired],
                "dropped": sorted(loaded.state.retired),
                "status": compact_status(view, loaded),
                "next": {"tool": "saga_wait", "arguments": {"saga_id": revises}},
            })
        # Named by the plan's content (the client's default): the same plan always gets the
        # same definition, and a different plan can never collide with an existing one.
        definition = client.submit_plan(plan)
        return {
            "accepted": True,
            "definition": definition.name,
            "version": definition.version,
            "definition_hash": definition.content_hash(),
            "steps": [step_semantics(step) for step in definition.steps],
            "start_with": {"tool": "start_saga",
                           "arguments": {"definition": definition.name, "input": {}}},
        }

    def saga_status(self, who: Principal, saga_id: str) -> dict[str, Any]:
        """The saga's state, steps, receipts and what is pending."""
        client = self._client(who, Action.READ, f"saga {saga_id!r}")
        view = client.status(saga_id)
        return self._shown(compact_status(view, self.fleet.repo.load(saga_id, tenant=who.tenant)))

    def saga_wait(
        self, who: Principal, saga_id: str,
        timeout_seconds: float = DEFAULT_TOOL_WAIT_SECONDS,
    ) -> dict[str, Any]:
        """Wait until the saga is terminal or waits for a person, at most ``timeout_seconds``
        (0 to 60); its status then, and ``settled`` (False: the wait timed out)."""
        client = self._client(who, Action.READ, f"saga {saga_id!r}")
        if (isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int | float)
                or not 0 <= timeout_seconds <= MAX_TOOL_WAIT_SECONDS):
            raise ArgumentsRejected("saga_wait", [Problem(
                "timeout_seconds", "out_of_range",
                f"must be a number from 0 to {MAX_TOOL_WAIT_SECONDS:g}")])
        waited = client.wait(saga_id, timeout_seconds)
        status = compact_status(waited.saga, self.fleet.repo.load(saga_id, tenant=who.tenant))
        return self._shown({"settled": waited.settled, "timed_out": not waited.settled,
                            **status, "next": _after_wait(waited.settled, waited.saga.terminal)})

    def saga_audit(self, who: Principal, saga_id: str) -> dict[str, Any]:
        """The saga's timeline of events from the log, with actors."""
        client = self._client(who, Action.READ, f"saga {saga_id!r}")
        client.status(saga_id)  # the client's own id and tenant checks
        return self._shown(audit_timeline(self.fleet.repo.load_history(saga_id,
                                                                       tenant=who.tenant)))

    def cancel_saga(self, who: Principal, saga_id: str, reason: str) -> dict[str, Any]:
        """Ask to cancel: what can still be compensated is compensated."""
        client = self._client(who, Action.CANCEL, f"saga {saga_id!r}")
        problems = _text_problems("reason", reason, AGENT_REASON_CHARS.value)
        if problems:
            raise ArgumentsRejected("cancel_saga", problems)
        view = client.cancel(saga_id, reason=reason)
        return self._shown(compact_status(view, self.fleet.repo.load(saga_id, tenant=who.tenant)))


def _after_wait(settled: bool, terminal: bool) -> str:
    """What an agent can do once saga_wait returns."""
    if not settled:
        return "still running: call saga_wait again to keep waiting"
    if terminal:
        return "the saga is finished: nothing more will happen"
    return ("the saga waits for a person (see pending); call saga_wait again to follow "
            "it once they act")


def _flag_problems(name: str, value: object) -> list[Problem]:
    """Why ``value`` is not a boolean: a dry run asked for as ``"true"`` must not start."""
    if isinstance(value, bool):
        return []
    return [Problem(name, "wrong_type", f"expected boolean, got {type(value).__name__}")]


def _text_problems(name: str, value: object, longest: int) -> list[Problem]:
    """Why ``value`` is not a usable non-blank text of at most ``longest`` characters."""
    if not isinstance(value, str):
        return [Problem(name, "wrong_type", f"expected string, got {type(value).__name__}")]
    if not value.strip():
        return [Problem(name, "missing", "must not be blank")]
    if len(value) > longest:
        return [Problem(name, "too_long", f"length must be <= {longest}")]
    return []


def _lineage_problems(lineage: object) -> list[Problem]:
    """Each wrong field of a start's lineage, named ``lineage.<field>``."""
    if lineage is None:
        return []
    if not isinstance(lineage, dict):
        return [Problem("lineage", "wrong_type",
                        f"expected object, got {type(lineage).__name__}")]
    problems = [Problem(f"lineage.{k}", "unknown_field",
                        f"not a lineage field (known: {', '.join(LINEAGE_FIELDS)})")
                for k in sorted(map(str, lineage)) if k not in LINEAGE_FIELDS][:5]
    for name in LINEAGE_FIELDS:
        problem = lineage_problem(name, lineage.get(name))
        if problem is not None:
            problems.append(Problem(f"lineage.{name}", "invalid", problem))
    return problems


def _plan_shape_problems(error: ValidationError) -> list[Problem]:
    """Plan-model errors named as ``steps[i].field`` so the agent can find each one."""
    problems = []
    for problem in problems_of(error):
        where = problem.where
        if where.startswith("actions."):
            index, _, rest = where.removeprefix("actions.").partition(".")
            where = f"steps[{index}]" + (f".{rest}" if rest else "")
        problems.append(Problem(where, problem.rule, problem.message))
    return problems

