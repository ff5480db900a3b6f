"""The fleet's Celery tasks and their documented names.

``sagafleet.step`` is internal: ``[saga_id, step_id, kind, attempt]``. The
``sagafleet.commands.*`` tasks let an agent in any language with a Celery client enqueue
saga commands with JSON keyword arguments, without importing sagafleet. Each takes a
**signed** command only (docs/agents.md "Signed commands",
:mod:`saga_core.access.signed_envelopes`):
``{"envelope": "<JSON text>", "kid": ..., "signature": ...}``, the envelope's ``args``
being the command's arguments:

* ``sagafleet.commands.start_saga``: ``definition, input, key, reason, lineage`` (``lineage``
  optional: ``agent_request_id, model_name, model_version, prompt_version, trace_id``, see
  :mod:`saga_core.agents.lineage`; a malformed one is dead-lettered as invalid input)
* ``sagafleet.commands.cancel_saga``: ``saga_id, reason``
* ``sagafleet.commands.submit_plan``: ``plan, name, version, input, key, reason, lineage``
  (all but ``plan`` optional; with ``input`` the plan's saga is started too, recording
  ``lineage`` as ``start_saga`` does; ``lineage`` without ``input`` is malformed); or
  ``plan, revises, reason`` for a replan of the running plan saga ``revises``
  (saga_core.agents.replans), or ``plan, revises_key, reason`` naming it by the idempotency key
  it was started with

Tenant and actor are the signing key's principal's (``fleet.client_for(principal)``), who
must hold a role allowing the command (:data:`COMMAND_ACTIONS`). An unsigned, forged
(bad signature, unknown or revoked key), replayed, expired or not-yet-valid command, or
one naming a tenant or actor, is dead-lettered with its refusal (kind ``UNAUTHENTICATED``
or ``FORBIDDEN``) and starts nothing (:mod:`application.command_signatures`).

No agent command is ever lost
-----------------------------
Until a command takes effect, its broker message is the only record of it. So a command
message is acknowledged only once its outcome is committed — the saga's events, or a dead
letter (``celery_app.COMMAND_TASK_OPTIONS``: acks late, never acknowledged on a failure or a
time-out). What a failure means is one rule, :mod:`workers.dead_letters.failures`:

* **transient** (a ``StoreUnavailable`` or any other ``UNAVAILABLE`` error, ``RaceLost``,
  a psycopg/redis/kombu connection error, an ``OSError``, a misconfigured deployment): the
  command is published again with a capped exponential backoff (``Task.retry``: the later
  copy carries the same task id, and the message in hand is acknowledged only after that
  copy is in the broker). If that publish fails, Celery would reject the message *without*
  requeue, dropping it; we reject it *with* requeue instead, and if even that cannot reach
  the broker, the message is still in kombu's unacknowledged set, from which Redis hands it
  out again once its visibility timeout ends. A worker killed mid-command ends the same way.
* **permanent** (malformed message, a refused signature, invalid input, unknown definition
  or saga, an idempotency key taken by other input, an unexpected error): the whole message
  is kept in ``fleet.dead_letters`` with its reason, error kind and refusal
  (:mod:`workers.dead_letters`), and only then acknowledged. ``sagafleet dead-letters``
  lists, shows, requeues and discards. If the dead letter cannot be written, the command is
  retried instead.

Every command is idempotent under redelivery (the price of never losing one). A redelivery
keeps its task id, so the command's single-use ``command_id`` lets it through (another task
id with the same ``command_id`` is a replay, refused). A start with a ``key`` lands on the
saga that key started; a start without one gets the key ``command:<kid>:<command_id>``
(:func:`keyless_start_key`), so even a replay that got through could not start a second
saga; a cancel records ``CancelRequested`` once; a plan without a ``name`` is named by its
content (``SagaClient.submit_plan``), so registering it again changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from celery import Celery, Task
from celery.exceptions import Reject
from kombu.exceptions import KombuError, OperationalError

from application.command_signatures import VerifiedCommand, verify_signed_command
from application.messages import MalformedMessage, StepCommand
from saga_core.access.roles import Action, NotPermitted, check_permitted
from saga_core.access.signed_envelopes import Refusal, refused
from saga_core.agents.lineage import parse_lineage
from saga_core.errors import ErrorKind, SagaError
from saga_core.limits import check_command_message
from workers.branches import SagaBranches
from workers.celery_app import COMMAND_TASK_OPTIONS, STEP_TASK
from workers.dead_letters.failures import CommandFailure, judge_failure, retry_delay_s
from workers.dead_letters.store import DeadLetter, dead_letter_body
from workers.dead_letters.tenants import letter_tenant
from workers.dead_letters.withholding import withhold_secrets

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from application.client import SagaClient
    from application.command_signatures import CommandNonces
    from application.principals.directory import PrincipalDirectory
    from application.secrets.guard import SecretGuard
    from application.telemetry.metrics import WorkerMetrics
    from events import EventStore
    from events.definition_store.port import Definitions
    from events.eventstore.model import Clock
    from saga_core.access.roles import Principal
    from saga_core.definitions.catalogue import ToolCatalogue
    from workers.dead_letters.store import DeadLetters
    from workers.executor import StepExecutor
    from workers.publisher import RedisStepPublisher

log = logging.getLogger(__name__)


class TaskSettings(Protocol):
    """The settings the tasks read (``workers.fleet.FleetConfig`` has them)."""

    @property
    def inline_steps(self) -> int:
        """Steps a worker may run in turn without a broker round trip."""

    @property
    def visibility_timeout_s(self) -> float:
        """How long the broker keeps a taken message before handing it out again."""


class TaskFleet(Protocol):
    """What the fleet's tasks use of the fleet that binds them (``workers.fleet.Fleet``):
    named here so that the tasks need not import the composition that imports them."""

    @property
    def config(self) -> TaskSettings:
        """The fleet's settings."""

    @property
    def clock(self) -> Clock:
        """The fleet's clock."""

    @property
    def catalogue(self) -> ToolCatalogue:
        """The tool catalogue."""

    @property
    def store(self) -> EventStore:
        """The event store."""

    @property
    def definitions(self) -> Definitions:
        """Saga definitions."""

    @property
    def principals(self) -> PrincipalDirectory:
        """The principal directory (tokens and signing keys)."""

    @property
    def command_nonces(self) -> CommandNonces:
        """Single-use command ids of signed commands."""

    @property
    def dead_letters(self) -> DeadLetters:
        """Messages that can never succeed."""

    @property
    def executor(self) -> StepExecutor:
        """Claims and runs step commands."""

    @property
    def publisher(self) -> RedisStepPublisher:
        """Publishes step commands after commits."""

    @property
    def secret_guard(self) -> SecretGuard:
        """Looks for secret values wherever this process writes."""

    @property
    def metrics(self) -> WorkerMetrics:
        """This process's Prometheus instruments."""

    @property
    def branches(self) -> ThreadPoolExecutor:
        """Threads for a saga's parallel branches."""

    @property
    def celery(self) -> Celery:
        """The Celery app the tasks are bound to."""

    def client_for(self, principal: Principal) -> SagaClient:
        """A SagaClient acting as ``principal``."""

START_SAGA = "sagafleet.commands.start_saga"
CANCEL_SAGA = "sagafleet.commands.cancel_saga"
SUBMIT_PLAN = "sagafleet.commands.submit_plan"
STEP_TASK_OPTIONS: Mapping[str, Any] = MappingProxyType({"acks_late": True, "ignore_result": True})
"""Celery task options of ``sagafleet.step`` (a wake-up call: the log is the record)."""
FLEET_TASKS = (STEP_TASK, START_SAGA, CANCEL_SAGA, SUBMIT_PLAN)
"""Every task name a worker of the fleet registers (what ``celery inspect registered`` lists)."""

COMMAND_KEY_PREFIX = "command:"
"""A start without a key is keyed by its signed command (:func:`keyless_start_key`)."""

COMMAND_ACTIONS: Mapping[str, Action] = MappingProxyType({
    START_SAGA: Action.START, CANCEL_SAGA: Action.CANCEL, SUBMIT_PLAN: Action.START})
"""The action each command asks of its principal's roles (the agent role allows all three)."""

#: A command's effect: (fleet, the verified command) -> None.
CommandAction = Callable[[TaskFleet, VerifiedCommand], None]


def keyless_start_key(kid: str, command_id: str) -> str:
    """The idempotency key of a signed start that gave none: its key and command id, which
    a redelivery, a retry, a requeue — and a replay — all keep."""
    return f"{COMMAND_KEY_PREFIX}{kid}:{command_id}"


@dataclass(frozen=True)
class CommandMessage:
    """One command message as it arrived: its task name, Celery task id and arguments."""

    task: str
    task_id: str | None
    args: Any
    kwargs: Any


class NotAFleetWorker(SagaError):
    """A task of the tooling app (``sagafleet.celery``) was run: only ``sagafleet worker``
    runs the fleet's tasks (the message stays for a real worker, or the sweeper resends)."""

    kind = ErrorKind.MISCONFIGURED


class BrokerUnavailable(SagaError):
    """The broker could not take a message (a requeued dead letter); nothing was marked."""

    kind = ErrorKind.UNAVAILABLE


def run_step(fleet: TaskFleet, args: Any, kwargs: Any) -> None:
    """Handle a step command with its due siblings, then run due follow-ups inline."""
    try:
        command = StepCommand.parse(args, kwargs)
    except MalformedMessage as exc:
        _dead_letter_step(fleet, args, kwargs, str(exc))
        return
    branches = SagaBranches(fleet.executor, fleet.publisher, fleet.branches,
                            budget=fleet.config.inline_steps)
    try:
        branches.run(command)
    finally:
        # The message is acknowledged once every branch it started has recorded its result.
        branches.join()


def _dead_letter_step(fleet: TaskFleet, args: Any, kwargs: Any, reason: str) -> None:
    """Keep a malformed step message; if that fails, log it and let it go: a step message
    is only a wake-up call, and the sweeper re-enqueues from the log whatever is due."""
    try:
        fleet.dead_letters.record(STEP_TASK, None, dead_letter_body(STEP_TASK, args, kwargs),
                                  reason, ErrorKind.INVALID_INPUT,
                                  tenant=letter_tenant(STEP_TASK, args, kwargs,
                                                       keys=fleet.principals, store=fleet.store))
    except SagaError as exc:
        log.error("could not dead-letter a malformed step message (%s): %s", reason, exc)
    else:
        fleet.metrics.dead_lettered(STEP_TASK)
        log.warning("dead-lettered %s: %s", STEP_TASK, reason)


def bind_tasks(app: Celery, fleet: TaskFleet) -> None:
    """Register the fleet's tasks on ``app``, closing over ``fleet`` (no global state)."""

    def step(task: Task, *args: Any, **kwargs: Any) -> None:
        _count_redelivery(fleet, task)
        run_step(fleet, list(args), kwargs)

    # shared=False: a task closes over *this* fleet, so it must not be added to every other
    # Celery app of the process (Celery's default), where it would act on the wrong fleet.
    app.task(name=STEP_TASK, bind=True, shared=False, **STEP_TASK_OPTIONS)(step)
    for name, action in ((START_SAGA, _start), (CANCEL_SAGA, _cancel), (SUBMIT_PLAN, _plan)):
        app.task(name=name, bind=True, shared=False, **COMMAND_TASK_OPTIONS)(
            _command_task(fleet, name, action))


def _count_redelivery(fleet: TaskFleet, task: Task) -> None:
    """Count a message the broker handed out again (kombu marks a restored message)."""
    delivery = task.request.delivery_info or {}
    if delivery.get("redelivered"):
        fleet.metrics.redelivered(task.name)


def register_task_names(app: Celery) -> None:
    """Register every name of :data:`FLEET_TASKS` on ``app`` without a fleet behind it.

    For the app that Celery's own tools load (``sagafleet.celery``): they only need the
    names, since the answers to ``inspect`` come from the running workers. A body here
    refuses to run, so a ``celery worker`` started on that app acts on nothing.
    """

    def not_a_fleet_worker(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotAFleetWorker("this Celery app is for Celery's tools (inspect, events, "
                              "Flower); run the fleet's tasks with `sagafleet worker`")

    for name in FLEET_TASKS:
        options = COMMAND_TASK_OPTIONS if name != STEP_TASK else STEP_TASK_OPTIONS
        app.task(name=name, shared=False, **options)(not_a_fleet_worker)


def _command_task(fleet: TaskFleet, name: str, action: CommandAction) -> Callable[..., None]:
    def command(task: Task, *args: Any, **kwargs: Any) -> None:
        _count_redelivery(fleet, task)
        run_command(fleet, task, CommandMessage(name, task.request.id, args, kwargs), action)

    command.__name__ = name.rsplit(".", 1)[-1]
    return command


def run_command(fleet: TaskFleet, task: Task, message: CommandMessage,
                action: CommandAction) -> None:
    """Take one agent command to its outcome (effect or dead letter), or leave it in the
    broker to be tried again (raises celery's ``Retry`` or ``Reject``)."""
    try:
        action(fleet, accepted_command(fleet, message))
        return  # took effect, or was already in effect (a redelivery)
    except Exception as exc:  # every failure is judged by the one rule, none escapes unjudged
        failure = judge_failure(exc)
    if not failure.retry:
        kept = _keep_dead_letter(fleet, message, failure)
        if kept is None:
            return
        failure = kept
    _retry_later(fleet, task, message, failure)


def accepted_command(fleet: TaskFleet, message: CommandMessage) -> VerifiedCommand:
    """The message's command once its signature, window, single use and its principal's
    roles allow it; else ``CommandRefused`` (or MalformedMessage, LimitExceeded)."""
    kwargs = _command_arguments(message.args, message.kwargs)
    command = verify_signed_command(message.task, kwargs, fleet.principals)
    if not message.task_id:
        raise MalformedMessage("a command message must carry its Celery task id")
    fleet.command_nonces.accept(command, message.task_id, fleet.clock())
    try:
        check_permitted(command.principal, COMMAND_ACTIONS[message.task], message.task)
    except NotPermitted as exc:
        raise refused(Refusal.NOT_PERMITTED, str(exc)) from None
    return command


def _command_arguments(args: Any, kwargs: Any) -> dict[str, Any]:
    """The command's keyword arguments, or MalformedMessage (LimitExceeded for a message
    over ``command_message_bytes``)."""
    check_command_message(args, kwargs)  # bounded before any signature is checked
    if args:
        raise MalformedMessage("saga commands take keyword arguments only")
    if not isinstance(kwargs, dict):
        raise MalformedMessage("keyword arguments must be a JSON object")
    return dict(kwargs)


def _keep_dead_letter(fleet: TaskFleet, message: CommandMessage,
                      failure: CommandFailure) -> CommandFailure | None:
    """Dead-letter a command that can never succeed; None once kept, else why it must be
    retried (nothing was kept, so the broker must keep the message)."""
    name, task_id = message.task, message.task_id
    # Secret input fields (values and refs) never reach the dead letter or the log line.
    body, reason, scrubbed = withhold_secrets(
        fleet.definitions, fleet.catalogue, name,
        dead_letter_body(name, message.args, message.kwargs), failure.reason,
        signer_tenant=_signer_tenant(fleet, message.kwargs))
    fleet.secret_guard.count("dead_letter", scrubbed)
    failure = CommandFailure(retry=False, kind=failure.kind, reason=reason,
                             refusal=failure.refusal)
    try:
        # The tenant proven by the message as it arrived (before any field was withheld).
        tenant = letter_tenant(name, message.args, message.kwargs, keys=fleet.principals,
                               store=fleet.store)
        fleet.dead_letters.record(name, task_id, body, failure.reason, failure.kind,
                                  tenant=tenant, refusal=failure.refusal)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the message must not be dropped
        log.error("%s[%s]: could not dead-letter (%s): %s", name, task_id, failure.reason, exc)
        return CommandFailure(retry=True, kind=judge_failure(exc).kind,
                              reason=f"dead letter not written: {type(exc).__name__}: {exc}")
    fleet.metrics.dead_lettered(name)
    log.warning("%s[%s] dead-lettered (%s): %s", name, task_id, failure.kind, failure.reason)
    return None


def _signer_tenant(fleet: TaskFleet, kwargs: Any) -> str | None:
    """The tenant of the live key that names itself in a signed command (whose definition
    says which input fields are secret), or None when it cannot be told."""
    kid = kwargs.get("kid") if isinstance(kwargs, dict) else None
    if not isinstance(kid, str):
        return None
    try:
        key = fleet.principals.signing_key(kid)
    except Exception:  # noqa: BLE001 - a dead letter must still be written: withhold all
        return None
    return None if key is None else key.principal.tenant


def _retry_later(fleet: TaskFleet, task: Task, message: CommandMessage,
                 failure: CommandFailure) -> NoReturn:
    """Publish the command again after a backoff and acknowledge this copy (celery's
    ``Retry``); if the broker cannot take the later copy, requeue this one instead."""
    # Capped well inside the visibility timeout: a copy waiting for its countdown is held
    # unacknowledged, and would otherwise be handed to another worker meanwhile.
    retries = task.request.retries or 0
    delay = retry_delay_s(retries, fleet.config.visibility_timeout_s / 4,
                          message.task_id or message.task)
    log.warning("%s[%s] will be tried again in %.1fs (retry %d): %s", message.task,
                message.task_id, delay, retries + 1, failure.reason)
    try:
        task.retry(countdown=delay)  # raises Retry once the later copy is in the broker
    except Reject:
        # Celery turns a failed re-publish into Reject(requeue=False), which drops the
        # message; requeue it instead (if the broker is gone for that too, the message
        # stays unacknowledged and comes back after the visibility timeout).
        log.warning("%s[%s]: the retry could not be published; requeued", message.task,
                    message.task_id)
        raise Reject(failure.reason, requeue=True) from None
    raise AssertionError("Task.retry always raises")  # pragma: no cover


def republish(app: Celery, letter: DeadLetter) -> None:
    """Publish a dead letter's message again: to its task, under its task id (a requeue)."""
    try:
        app.send_task(letter.task, args=letter.args, kwargs=letter.kwargs,
                      task_id=letter.task_id)
    except (KombuError, OperationalError, OSError) as exc:
        raise BrokerUnavailable(f"could not publish dead letter {letter.id}: {exc}") from exc


def _client(fleet: TaskFleet, command: VerifiedCommand) -> SagaClient:
    """A client acting as the command's key's principal, for a command that crossed the
    broker (a secret input field must come by ref)."""
    return fleet.client_for(command.principal).via_broker()


def _required(kw: dict[str, Any], name: str) -> Any:
    if name not in kw:
        raise MalformedMessage(f"missing argument {name!r}")
    return kw.pop(name)


def _start(fleet: TaskFleet, command: VerifiedCommand) -> None:
    kw = dict(command.envelope.args)
    key = kw.pop("key", None)
    if key is None:
        key = keyless_start_key(command.kid, command.envelope.command_id)
    _client(fleet, command).start(_required(kw, "definition"), _required(kw, "input"),
                                  key=key, reason=kw.pop("reason", ""),
                                  lineage=kw.pop("lineage", None), **_no_more(kw))


def _cancel(fleet: TaskFleet, command: VerifiedCommand) -> None:
    kw = dict(command.envelope.args)
    _client(fleet, command).cancel(_required(kw, "saga_id"), reason=kw.pop("reason", ""),
                                   **_no_more(kw))


def _plan(fleet: TaskFleet, command: VerifiedCommand) -> None:
    """Register the plan (named by its content unless the command names it) and, when the
    command carries an ``input``, start its saga: keyed by ``key``, else by the command as
    a keyless start is, so a redelivery lands on the same saga."""
    kw = dict(command.envelope.args)
    revises, revises_key = kw.pop("revises", None), kw.pop("revises_key", None)
    if revises is not None and revises_key is not None:
        raise MalformedMessage("give revises (a saga id) or revises_key (its start key), not both")
    if revises is not None or revises_key is not None:
        # A replan of a running plan saga: the next version of its plan, not a new saga.
        target = revises if revises is not None else revises_key
        if not isinstance(target, str):
            raise MalformedMessage(f"revises must be a string, got {type(target).__name__}")
        client = _client(fleet, command)
        revise = client.revise_plan if revises is not None else client.revise_plan_for_key
        revise(target, _required(kw, "plan"), reason=kw.pop("reason", ""), **_no_more(kw))
        return
    client = _client(fleet, command)
    version = kw.pop("version", 1)
    if type(version) is not int:
        raise MalformedMessage(f"argument 'version' must be an int, got {version!r}")
    plan, name = _required(kw, "plan"), kw.pop("name", None)
    data, key, reason = kw.pop("input", None), kw.pop("key", None), kw.pop("reason", "")
    asked = kw.pop("lineage", None)
    _no_more(kw)
    if data is None and asked is not None:
        raise MalformedMessage("lineage is recorded on a saga start: give it with an input")
    # A malformed lineage is refused (InvalidLineage, invalid input) before anything runs.
    lineage = parse_lineage(asked)
    if data is None:
        client.submit_plan(plan, name=name, version=version)
        return
    if key is None:
        key = keyless_start_key(command.kid, command.envelope.command_id)
    # The start is dry-run first (pure): an input the plan refuses dead-letters the command
    # before its definition is registered, so nothing is left behind by it.
    client.dry_run_plan(plan, data, name=name, version=version, key=key, reason=reason)
    definition = client.submit_plan(plan, name=name, version=version)
    client.start(definition.name, data, key=key, version=definition.version, reason=reason,
                 lineage=lineage)


def _no_more(kw: dict[str, Any]) -> dict[str, Any]:
    if kw:
        raise MalformedMessage(f"unexpected arguments: {sorted(kw)}")
    return {}
