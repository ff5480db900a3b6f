"""Signing saga commands in a Python agent: ``CommandSigner``.

Only the standard library and ``cryptography`` are imported here, so an agent process can
use it without sagafleet's database, broker or pydantic::

    from celery import Celery
    from sagafleet.agent import CommandSigner

    signer = CommandSigner(kid, private_key_pem)  # from `sagafleet principals key add ...`
    app = Celery(broker="redis://redis:6379/0")
    # With Redis Sentinel: broker="sentinel://s1:26379;sentinel://s2:26379" and
    # app.conf.broker_transport_options = {"master_name": "sagafleet"}
    app.conf.task_serializer = "json"
    name, kwargs = signer.start_saga("trip", {...}, key="booking-7781")
    app.send_task(name, kwargs=kwargs, queue=COMMAND_QUEUE)

Each call signs a new envelope with a fresh ``command_id`` (a command is single-use:
publish the *same* ``(name, kwargs)`` again to retry a publish, never sign again for
that), valid from now for ``lifetime_s`` seconds. The layout is docs/agents.md "Signed commands";
the worker's checks are ``saga_core.access.signed_envelopes`` and
``application.command_signatures``.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

# The wire contract, as docs/agents.md "Signed commands" documents it for every language. The
# fleet's own copy is saga_core.access.signed_envelopes / workers.tasks (this module imports
# neither,
# so that an agent needs no pydantic or database driver); tests/unit/test_agent_signer.py
# keeps the two equal.
ENVELOPE_VERSION = 1
START_SAGA = "sagafleet.commands.start_saga"
CANCEL_SAGA = "sagafleet.commands.cancel_saga"
SUBMIT_PLAN = "sagafleet.commands.submit_plan"
COMMAND_QUEUE = "sagafleet.commands"
MAX_LIFETIME_S = 15 * 60
DEFAULT_LIFETIME_S = 5 * 60
"""Long enough for a command to wait out a short broker or database outage in the queue,
short enough that a captured message soon stops being worth anything."""


class CommandSigner:
    """Signs saga commands with one Ed25519 key (``kid``) of an agent principal."""

    def __init__(self, kid: str, private_key_pem: bytes | str, *,
                 lifetime_s: int = DEFAULT_LIFETIME_S,
                 clock: Callable[[], float] = time.time) -> None:
        """``private_key_pem``: the PKCS#8 PEM the key was issued with. ``lifetime_s``: how
        long each command stays valid (1 to 900 seconds). ``clock``: unix seconds now."""
        if not 1 <= lifetime_s <= MAX_LIFETIME_S:
            raise ValueError(f"lifetime_s must be from 1 to {MAX_LIFETIME_S}, got {lifetime_s}")
        pem = private_key_pem.encode() if isinstance(private_key_pem, str) else private_key_pem
        key = load_pem_private_key(pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"a signing key must be Ed25519, got {type(key).__name__}")
        self.kid = kid
        self._key = key
        self._lifetime_s = lifetime_s
        self._clock = clock

    def start_saga(self, definition: str, input: dict[str, Any], *, key: str | None = None,
                   reason: str = "", command_id: str | None = None,
                   lineage: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``(task name, kwargs)`` of a signed start (idempotent by ``key``; without one,
        by the command's id). Secret input fields go as ``{"$secret_ref": ...}`` refs.
        ``lineage``: who and what asks (``agent_request_id``, ``model_name``,
        ``model_version``, ``prompt_version``, ``trace_id``), recorded on the saga."""
        args: dict[str, Any] = {"definition": definition, "input": input, "reason": reason}
        if key is not None:
            args["key"] = key
        if lineage is not None:
            args["lineage"] = lineage
        return self.sign(START_SAGA, args, command_id=command_id)

    def cancel_saga(self, saga_id: str, *, reason: str = "",
                    command_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """``(task name, kwargs)`` of a signed cancel."""
        return self.sign(CANCEL_SAGA, {"saga_id": saga_id, "reason": reason},
                         command_id=command_id)

    def submit_plan(self, plan: dict[str, Any], *, name: str | None = None,
                    version: int | None = None, input: dict[str, Any] | None = None,
                    key: str | None = None, revises: str | None = None,
                    revises_key: str | None = None, reason: str = "",
                    command_id: str | None = None,
                    lineage: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``(task name, kwargs)`` of a signed plan (named by its content without ``name``;
        version 1 without ``version``); with ``input`` the worker also starts its saga
        (idempotent by ``key``; without one, by the command's id). With ``revises`` (a saga
        id) or ``revises_key`` (the key the saga was started with: the agent request), a
        revision of that running plan saga (its next plan version: actions it keeps keep
        their operation keys). ``lineage`` (with ``input`` only): who and what asks, as
        :meth:`start_saga` records it on the saga."""
        args: dict[str, Any] = {"plan": plan}
        targets = [t for t in (revises, revises_key) if t is not None]
        if targets:
            if len(targets) > 1 or any(
                    v is not None for v in (name, version, input, key, lineage)):
                raise ValueError("a revision names one saga (revises or revises_key) and "
                                 "takes its plan name: no name, version, input, key or lineage")
            args["revises" if revises is not None else "revises_key"] = targets[0]
            args["reason"] = reason
            return self.sign(SUBMIT_PLAN, args, command_id=command_id)
        if lineage is not None and input is None:
            raise ValueError("lineage is recorded on a saga start: give it with an input")
        optional = {"name": name, "version": version, "input": input, "key": key,
                    "lineage": lineage}
        args.update({k: v for k, v in optional.items() if v is not None})
        if reason:
            args["reason"] = reason
        return self.sign(SUBMIT_PLAN, args, command_id=command_id)

    def sign(self, task: str, args: dict[str, Any], *,
             command_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """``(task, kwargs)``: ``args`` in a new envelope for ``task``, signed."""
        issued_at = int(self._clock())
        envelope = json.dumps({
            "v": ENVELOPE_VERSION, "task": task,
            "command_id": command_id or str(uuid.uuid4()),
            "issued_at": issued_at, "expires_at": issued_at + self._lifetime_s,
            "args": args,
        }, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        signature = self._key.sign(envelope.encode("utf-8"))
        return task, {"envelope": envelope, "kid": self.kid,
                      "signature": base64.urlsafe_b64encode(signature).rstrip(b"=").decode()}
