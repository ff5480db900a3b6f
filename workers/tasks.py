"""The fleet's Celery tasks and their documented names.

``sagafleet.step`` is internal: ``[saga_id, step_id, kind, attempt]``. The
``sagafleet.commands.*`` tasks let an agent in any language with a Celery client enqueue
saga commands with JSON arguments, without importing sagafleet:

* ``sagafleet.commands.start_saga(definition, input, key, tenant, actor, reason)``
* ``sagafleet.commands.cancel_saga(saga_id, tenant, actor, reason)``
* ``sagafleet.commands.submit_plan(plan, tenant, actor, name)``

Malformed messages and rejected commands are dead-lettered (kept in ``fleet.dead_letters``
with the reason), never retried and never allowed to crash the worker.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from celery import Celery

from saga_core.errors import SagaError
from saga_core.limits import check_command_message
from workers.branches import SagaBranches
from workers.celery_app import STEP_TASK
from workers.messages import MalformedMessage, StepCommand

if TYPE_CHECKING:
    from workers.fleet import Fleet

log = logging.getLogger(__name__)

START_SAGA = "sagafleet.commands.start_saga"
CANCEL_SAGA = "sagafleet.commands.cancel_saga"
SUBMIT_PLAN = "sagafleet.commands.submit_plan"


def dead_letter(fleet: Fleet, task: str, body: Any, reason: str) -> None:
    """Keep a rejected message (truncated) for an operator; never raise from here."""
    try:
        text = json.dumps(body, default=str)[:4000]
    except (TypeError, ValueError):
        text = repr(body)[:4000]
    log.warning("dead-lettered %s: %s", task, reason)
    try:
        with fleet.store.connection() as conn:
            conn.execute(
                "INSERT INTO fleet.dead_letters (task, body, reason) VALUES (%s, %s, %s)",
                (task, text, reason[:2000]),
            )
    except SagaError as exc:
        log.error("could not dead-letter %s: %s", task, exc)


def run_step(fleet: Fleet, args: Any, kwargs: Any) -> None:
    """Handle a step command with its due siblings, then run due follow-ups inline."""
    try:
        command = StepCommand.parse(args, kwargs)
    except MalformedMessage as exc:
        dead_letter(fleet, STEP_TASK, {"args": args, "kwargs": kwargs}, str(exc))
        return
    branches = SagaBranches(fleet.executor, fleet.publisher, fleet.branches,
                            budget=fleet.config.inline_steps)
    try:
        branches.run(command)
    finally:
        # The message is acknowledged once every branch it started has recorded its result.
        branches.join()


def bind_tasks(app: Celery, fleet: Fleet) -> None:
    """Register the fleet's tasks on ``app``, closing over ``fleet`` (no global state)."""

    def step(*args: Any, **kwargs: Any) -> None:
        run_step(fleet, list(args), kwargs)

    def start_saga(*args: Any, **kwargs: Any) -> None:
        _command(fleet, START_SAGA, args, kwargs, _start)

    def cancel_saga(*args: Any, **kwargs: Any) -> None:
        _command(fleet, CANCEL_SAGA, args, kwargs, _cancel)

    def submit_plan(*args: Any, **kwargs: Any) -> None:
        _command(fleet, SUBMIT_PLAN, args, kwargs, _plan)

    app.task(name=STEP_TASK, acks_late=True, ignore_result=True)(step)
    for name, fn in ((START_SAGA, start_saga), (CANCEL_SAGA, cancel_saga),
                     (SUBMIT_PLAN, submit_plan)):
        app.task(name=name, ignore_result=True)(fn)


def _command(fleet: Fleet, name: str, args: Any, kwargs: Any, action: Any) -> None:
    try:
        check_command_message(args, kwargs)  # bounded before any model is built from it
        if args:
            raise MalformedMessage("saga commands take keyword arguments only")
        if not isinstance(kwargs, dict):
            raise MalformedMessage("keyword arguments must be a JSON object")
        action(fleet, dict(kwargs))
    except (SagaError, TypeError, ValueError, KeyError) as exc:
        dead_letter(fleet, name, {"args": args, "kwargs": kwargs}, f"{type(exc).__name__}: {exc}")


def _client(fleet: Fleet, kw: dict[str, Any]):  # type: ignore[no-untyped-def]
    tenant, actor = kw.pop("tenant", "default"), kw.pop("actor", "agent")
    if not isinstance(tenant, str) or not isinstance(actor, str):
        raise MalformedMessage("tenant and actor must be strings")
    return fleet.client(tenant=tenant, actor=actor)


def _start(fleet: Fleet, kw: dict[str, Any]) -> None:
    client = _client(fleet, kw)
    client.start(kw.pop("definition"), kw.pop("input"), key=kw.pop("key", None),
                 reason=kw.pop("reason", ""), **_no_more(kw))


def _cancel(fleet: Fleet, kw: dict[str, Any]) -> None:
    client = _client(fleet, kw)
    client.cancel(kw.pop("saga_id"), reason=kw.pop("reason", ""), **_no_more(kw))


def _plan(fleet: Fleet, kw: dict[str, Any]) -> None:
    client = _client(fleet, kw)
    client.submit_plan(kw.pop("plan"), name=kw.pop("name", "agent_plan"), **_no_more(kw))


def _no_more(kw: dict[str, Any]) -> dict[str, Any]:
    if kw:
        raise MalformedMessage(f"unexpected arguments: {sorted(kw)}")
    return {}
