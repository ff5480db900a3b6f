"""Your own tools, as a fleet runs them: copy this folder and replace the providers.

The onboarding saga calls three providers: a CRM (accounts), a ticket desk and a mailer.
Here each is a table in PostgreSQL (schema ``onboarding``), so the example runs anywhere the
fleet runs; in your deployment they are the HTTP APIs you already call. What carries over
is the contract every tool keeps (docs/definitions.md "Your own tools"):

* ``execute(args, key)`` passes the operation key to the provider as its idempotency key
  (here: the primary key of the row), so a retry with the same key changes nothing;
* ``lookup(key)`` asks the provider what happened under the key after an ambiguous outcome:
  the receipt, ``Absent`` (nothing committed) or ``Unknown`` (it cannot say now);
* errors are classified: a provider that cannot be reached before the request left is
  ``Transient`` (retried with the same key); one lost while the request was committing is
  ``Ambiguous`` (reconciled by ``lookup``); a refusal is a ``BusinessRejection`` (the saga
  compensates what it did, in reverse order).

Run it::

    export SAGAFLEET_DATABASE_URL=postgresql://...   # the providers' database (or
    export ONBOARDING_DATABASE_URL=postgresql://...  # another one for them alone)
    export SAGAFLEET_TOOLS=onboarding_tools:tool_set PYTHONPATH=examples/custom_tools
    python examples/custom_tools/onboarding_tools.py install   # the providers' tables
    sagafleet worker                                         # runs these tools, nothing else
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from saga_core import ToolCatalogue
from saga_core.contracts import ErrorClass, Receipt
from saga_core.errors import ErrorKind, SagaError
from workers.tools import Absent, LookupResult, ToolError, ToolRegistry, ToolSet, Unknown

HERE = Path(__file__).resolve().parent

PROVIDER_TABLES = """
CREATE SCHEMA IF NOT EXISTS onboarding;
CREATE TABLE IF NOT EXISTS onboarding.effects (
    operation_key text PRIMARY KEY,          -- the idempotency key the fleet passed
    tool          text NOT NULL,
    resource_id   text NOT NULL,
    status        text NOT NULL,
    fields        jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
"""

UNDELIVERABLE_DOMAIN = ".invalid"
"""The mailer refuses addresses in this reserved top-level domain (RFC 2606): the example's
way to show a refusal at the pivot compensating the account and the ticket."""


class ProvidersNotConfigured(SagaError):
    """Neither ONBOARDING_DATABASE_URL nor SAGAFLEET_DATABASE_URL names the providers."""

    kind = ErrorKind.MISCONFIGURED


def providers_url() -> str:
    """Where the example's providers keep their records."""
    url = os.environ.get("ONBOARDING_DATABASE_URL") or os.environ.get("SAGAFLEET_DATABASE_URL")
    if not url:
        raise ProvidersNotConfigured(
            "the onboarding tools need their providers' database: set ONBOARDING_DATABASE_URL "
            "(or SAGAFLEET_DATABASE_URL)")
    return url


@dataclass(frozen=True)
class ProviderCall:
    """One tool of one provider: ``make`` turns the arguments into the record it keeps."""

    tool: str
    url: str

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            # Nothing was sent yet: retrying with the same key is safe.
            raise ToolError(ErrorClass.TRANSIENT, f"{self.tool}: provider unreachable") from exc

    def record(self, key: str, resource_id: str, status: str, fields: Mapping[str, Any]) -> Receipt:
        """Keep the effect once under ``key`` and return what the provider holds for it."""
        with self._connect() as conn:
            try:
                conn.execute(
                    "INSERT INTO onboarding.effects"
                    " (operation_key, tool, resource_id, status, fields)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (operation_key) DO NOTHING",
                    (key, self.tool, resource_id, status, Jsonb(dict(fields))))
                row = conn.execute(
                    "SELECT resource_id, status, fields FROM onboarding.effects"
                    " WHERE operation_key = %s", (key,)).fetchone()
            except psycopg.OperationalError as exc:
                # The request left: it may have committed. The fleet reconciles by lookup.
                raise ToolError(ErrorClass.AMBIGUOUS, f"{self.tool}: lost while committing",
                                {"key": key}) from exc
        if row is None:
            raise ToolError(ErrorClass.AMBIGUOUS, f"{self.tool}: no record after the write")
        return Receipt(resource_id=row[0], status=row[1], fields=row[2])

    def lookup(self, key: str) -> LookupResult:
        """What the provider holds under ``key``."""
        try:
            with self._connect() as conn:
                row = conn.execute(
                    "SELECT resource_id, status, fields FROM onboarding.effects"
                    " WHERE operation_key = %s AND tool = %s", (key, self.tool)).fetchone()
        except (ToolError, psycopg.OperationalError) as exc:
            return Unknown(f"{self.tool}: provider unreachable ({exc})")
        if row is None:
            return Absent(f"{self.tool}: nothing under {key}")
        return Receipt(resource_id=row[0], status=row[1], fields=row[2])


@dataclass(frozen=True)
class CreateAccount:
    """``crm.create_account``: an account for the address and plan."""

    provider: ProviderCall

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Open the account (once per key)."""
        return self.provider.record(key, f"acct_{key[:16]}", "open",
                                    {"email": args["email"], "plan": args["plan"]})

    def lookup(self, key: str) -> LookupResult:
        """The account opened under ``key``, if any."""
        return self.provider.lookup(key)


@dataclass(frozen=True)
class OpenTicket:
    """``tickets.open``: a setup ticket on the account."""

    provider: ProviderCall

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Open the ticket (once per key)."""
        return self.provider.record(key, f"tkt_{key[:16]}", "open",
                                    {"account_id": args["account_id"], "subject": args["subject"]})

    def lookup(self, key: str) -> LookupResult:
        """The ticket opened under ``key``, if any."""
        return self.provider.lookup(key)


@dataclass(frozen=True)
class SendWelcome:
    """``email.send_welcome``: the pivot; refused for an undeliverable address."""

    provider: ProviderCall

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Send the mail (once per key), or refuse an address that cannot receive it."""
        if str(args["to"]).endswith(UNDELIVERABLE_DOMAIN):
            raise ToolError(ErrorClass.BUSINESS_REJECTION, f"{args['to']} cannot receive mail")
        return self.provider.record(key, f"msg_{key[:16]}", "sent",
                                    {"to": args["to"], "ticket_id": args["ticket_id"]})

    def lookup(self, key: str) -> LookupResult:
        """The mail sent under ``key``, if any."""
        return self.provider.lookup(key)


@dataclass(frozen=True)
class Undo:
    """A compensation (``crm.close_account``, ``tickets.cancel``): records the undoing under
    its own operation key, naming what it undid."""

    provider: ProviderCall
    target: str  # the argument naming what is undone

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Undo once per key (a second call with the key changes nothing)."""
        return self.provider.record(key, str(args[self.target]), "undone",
                                    {self.target: args[self.target]})

    def lookup(self, key: str) -> LookupResult:
        """The undoing recorded under ``key``, if any."""
        return self.provider.lookup(key)


def catalogue() -> ToolCatalogue:
    """The allowlist (onboarding_tools.yaml): what every tool is."""
    return ToolCatalogue.from_yaml((HERE / "onboarding_tools.yaml").read_text(encoding="utf-8"))


def tool_set() -> ToolSet:
    """The catalogue and one implementation per entry (what
    ``SAGAFLEET_TOOLS=onboarding_tools:tool_set`` names)."""
    url = providers_url()

    def call(tool: str) -> ProviderCall:
        return ProviderCall(tool, url)

    return ToolSet(catalogue(), ToolRegistry({
        ("crm.create_account", 1): CreateAccount(call("crm.create_account")),
        ("crm.close_account", 1): Undo(call("crm.close_account"), "account_id"),
        ("tickets.open", 1): OpenTicket(call("tickets.open")),
        ("tickets.cancel", 1): Undo(call("tickets.cancel"), "ticket_id"),
        ("email.send_welcome", 1): SendWelcome(call("email.send_welcome")),
    }))


def install(url: str) -> None:
    """Create the providers' tables (your real providers have their own)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PROVIDER_TABLES)


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python onboarding_tools.py install")
    install(providers_url())
    print("onboarding providers installed")
