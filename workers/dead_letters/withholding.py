"""What a dead letter may keep of a refused message: every secret withheld, always.

A dead letter is kept for an operator (``workers.dead_letters``), in a table anyone with
the database can read; a command refused *because* it carried a raw secret over the broker
is the very case that must not leave the secret there. :func:`withhold_secrets` shapes the
body before it is stored:

* a step command carries identifiers only and is kept as it is;
* positional arguments of a saga command are withheld whole (commands take keyword
  arguments only, so they cannot be told apart);
* in a start's ``input``, each field the named definition marks secret — value or ref — is
  withheld. When the definition cannot be found (not registered yet: the usual fix is to
  register it and requeue), the catalogue is what declares secrets: a field named like an
  argument it marks secret (``card_token``) is withheld when it holds a value, and kept when
  it holds a ref (a ref is not the secret, and it is what the requeued start redeems).
  When the definition cannot be read at all, every input value is withheld;
* in a plan (``submit_plan``), a literal given to a secret argument is withheld, and the
  plan's ``input`` is withheld as the plan's own secret fields say (``plan_input_fields``),
  every value when the plan cannot be read;
* a signed command's envelope is read, withheld as above and written again; an altered
  envelope can never verify, so its signature is withheld too (the agent signs a new
  command). A signed command's definition is looked up as the tenant of the key that signed
  it; when that key is unknown, every input value of its envelope is withheld.

Then, the last line of defence by value: every withheld value (and each of its forms) is
looked for in the rest of the body and in the reason, replaced and counted — a token also
given in the flight id, or quoted by the refusal, must not stay either.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from application.secrets.placeholders import is_secret_ref
from events.definition_store.port import DefinitionNotFound, Definitions
from saga_core.agents.plans import AgentPlan, plan_input_fields
from saga_core.definitions.catalogue import ToolCatalogue
from saga_core.definitions.secret_flow import input_field_of
from saga_core.secret_scrub import SecretNeedles, scrub_document, scrub_text
from workers.celery_app import STEP_TASK

WITHHELD = "[secret withheld]"
"""What a dead letter holds instead of a secret input (value or ref)."""

SIGNATURE_WITHHELD = "[withheld: the envelope was kept with its secrets withheld]"
"""A dead letter's signature once its envelope was altered (it could never verify again)."""


class WithheldLetter(NamedTuple):
    """A refused message's body and reason as a dead letter may keep them, and how many
    occurrences of a withheld value were found elsewhere in them and replaced."""

    body: Any
    reason: str
    scrubbed: int


def withhold_secrets(
    definitions: Definitions, catalogue: ToolCatalogue, task: str, body: Any, reason: str, *,
    signer_tenant: str | None = None,
) -> WithheldLetter:
    """``body`` and ``reason`` with every secret withheld (see the module docstring). Never
    raises: a dead letter must always be written."""
    if task == STEP_TASK or not isinstance(body, dict):
        return WithheldLetter(body, reason, 0)
    letter = _Letter(definitions, catalogue)
    kept = dict(body)
    args = kept.get("args")
    if args:
        letter.hidden.append(args)
        kept["args"] = f"[{len(args)} positional arguments withheld]"
    kwargs = kept.get("kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("envelope"), str):
        kwargs = letter.envelope(kwargs, signer_tenant)
    elif isinstance(kwargs, dict):
        # The tenant the command names (tasks reads it so, "default" when absent).
        kwargs = letter.arguments(kwargs, kwargs.get("tenant", "default"))
    elif kwargs is not None:
        letter.hidden.append(kwargs)
        kwargs = WITHHELD
    if "kwargs" in kept:
        kept["kwargs"] = kwargs
    needles = SecretNeedles.of(letter.hidden)
    in_body = scrub_document(kept, needles)
    in_reason = scrub_text(reason, needles)
    return WithheldLetter(in_body.value, in_reason.value, in_body.count + in_reason.count)


class _Letter:
    """One letter being withheld: the definitions and catalogue that say what is secret,
    and every value withheld so far."""

    def __init__(self, definitions: Definitions, catalogue: ToolCatalogue) -> None:
        self.definitions = definitions
        self.catalogue = catalogue
        self.hidden: list[Any] = []

    def envelope(self, kwargs: dict[str, Any], tenant: str | None) -> dict[str, Any]:
        """A signed command's kwargs with its envelope's secrets withheld (an envelope
        that is not a JSON object is withheld whole: the fleet could not read it, so
        nothing in it could ever be requeued)."""
        text = kwargs["envelope"]
        try:
            envelope = json.loads(text)
        except (ValueError, RecursionError):
            envelope = None
        if not isinstance(envelope, dict):
            self.hidden.append(text)
            return {**kwargs, "envelope": WITHHELD}
        args = envelope.get("args")
        if not isinstance(args, dict):
            return kwargs
        before = len(self.hidden)
        masked = self.arguments(args, tenant)
        if len(self.hidden) == before:
            return kwargs  # nothing secret in it: kept as signed, so a requeue can verify it
        altered = json.dumps({**envelope, "args": masked}, separators=(",", ":"),
                             ensure_ascii=False)
        return {**kwargs, "envelope": altered, "signature": SIGNATURE_WITHHELD}

    def arguments(self, args: dict[str, Any], tenant: Any) -> dict[str, Any]:
        """A command's arguments with a plan's secret literals and the input's secret
        fields withheld."""
        kept = dict(args)
        secret: frozenset[str] | None
        keep_refs = False
        if "plan" in kept:
            kept["plan"], secret = self._plan(kept["plan"])
        elif isinstance(kept.get("definition"), str) and isinstance(tenant, str):
            secret, keep_refs = self._declared(kept["definition"], tenant)
        else:
            secret = None
        if "input" in kept:
            kept["input"] = self._input(kept["input"], secret, keep_refs=keep_refs)
        return kept

    def _declared(self, name: str, tenant: str) -> tuple[frozenset[str] | None, bool]:
        """The secret fields of the definition the start names, as its tenant sees it, and
        whether a ref may be kept (only where the definition is not registered yet)."""
        try:
            definition = self.definitions.get(name, tenant=tenant, cached_latest=True)
        except DefinitionNotFound:
            return self.catalogue_secrets(), True
        except Exception:  # noqa: BLE001 - unreadable, anything else: a dead letter must
            return None, False  # still be written, so every value is withheld
        return frozenset(f for f, spec in definition.input.items() if spec.secret), False

    def catalogue_secrets(self) -> frozenset[str]:
        """The argument names the catalogue marks secret (``card_token``, ``iban``)."""
        return frozenset(name for tool in self.catalogue.tools
                         for name, arg in tool.args.items() if arg.secret)

    def _input(self, data: Any, secret: frozenset[str] | None, *, keep_refs: bool) -> Any:
        """``data`` with its secret fields withheld (every value when ``secret`` is None)."""
        if not isinstance(data, dict):
            self.hidden.append(data)
            return WITHHELD
        masked = {}
        for field, value in data.items():
            withheld = secret is None or (field in secret
                                          and not (keep_refs and is_secret_ref(value)))
            if withheld:
                self.hidden.append(value)
            masked[field] = WITHHELD if withheld else value
        return masked

    def _plan(self, plan: Any) -> tuple[Any, frozenset[str] | None]:
        """A plan with every literal given to a secret argument withheld, and the input
        fields it makes secret (None when the plan cannot be read)."""
        actions = plan.get("actions") if isinstance(plan, dict) else None
        if not isinstance(actions, list):
            return plan, None
        kept = []
        for action in actions:
            spec = self._spec(action)
            if spec is None or not isinstance(action.get("args"), dict):
                kept.append(action)
                continue
            args = dict(action["args"])
            for name, value in action["args"].items():
                arg = spec.args.get(name)
                if arg is not None and arg.secret and input_field_of(value) is None:
                    self.hidden.append(value)
                    args[name] = WITHHELD
            kept.append({**action, "args": args})
        try:
            fields = plan_input_fields(AgentPlan.model_validate(plan), self.catalogue)
        except Exception:  # noqa: BLE001 - a plan it cannot read: withhold its whole input
            return {**plan, "actions": kept}, None
        return ({**plan, "actions": kept},
                frozenset(name for name, field in fields.items() if field.secret))

    def _spec(self, action: Any) -> Any:
        """The catalogue spec of a plan action, or None."""
        if not isinstance(action, dict) or not isinstance(action.get("tool"), str):
            return None
        version = action.get("version", 1)
        return self.catalogue.get(action["tool"], version) if type(version) is int else None
