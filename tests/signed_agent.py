"""Agents that sign their Celery commands, for every test that sends ``sagafleet.commands.*``:
an agent principal of a tenant with its own Ed25519 key in the fleet's principal directory,
and the bare Celery client an agent in any language would use."""

from __future__ import annotations

import uuid
from typing import Any

from celery import Celery

from application.principals.directory import PrincipalConflict
from saga_core.access.roles import AGENT_ROLE
from sagafleet.agent import COMMAND_QUEUE, CommandSigner


def agent_signer(fleet: Any, tenant: str = "default", name: str = "travel-agent", *,
                 roles: tuple[str, ...] = (AGENT_ROLE,), kind: str = "agent",
                 **options: Any) -> CommandSigner:
    """A signer holding a new key of the principal ``name`` of ``tenant`` (added with
    ``roles`` if it does not exist yet) in ``fleet``'s directory."""
    try:
        fleet.principals.add(tenant, name, kind, roles)
    except PrincipalConflict:
        pass  # the same agent, another key
    issued = fleet.principals.add_signing_key(tenant, name)
    return CommandSigner(issued.kid, issued.private_key_pem, **options)


def bare_celery(broker: str) -> Celery:
    """What an agent process in any language does: name the task, send JSON arguments."""
    app = Celery("agent", broker=broker, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


def send(app: Celery, signed: tuple[str, dict[str, Any]], task_id: str | None = None) -> str:
    """Publish a signed ``(task, kwargs)`` on the commands queue; its Celery task id (pass
    the same one again for a redelivery of the same message)."""
    task, kwargs = signed
    task_id = task_id or str(uuid.uuid4())
    app.send_task(task, kwargs=kwargs, queue=COMMAND_QUEUE, task_id=task_id)
    return task_id
