"""The payout tools over PostgreSQL tables of the fleet's database, for real worker processes.

The payout example's contracts (``sagafleet/example_sagas/payout*.yaml``) with times short enough
for a test on real servers: a credit's postcondition horizon of 2 s, commit horizons of 1 s,
and the timeouts and deadline each test declares. The tables:

* ``test_payout_accounts(account, balance, settles)``: a credit into an account that does
  not settle stays ``pending`` until the test settles it;
* ``test_payout_ops(key, tool, account, amount, status)``: one row per operation key (the
  tools dedupe by key); ``lookup(key)`` reads it, with its status as it is *now*;
* ``test_payout_gates(tool, state)``: a call of a gated tool first waits for the gate's
  advisory lock, so a test holding it keeps the call hanging, without any timing window;
  set to ``abandon`` before release, the call then commits nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from saga_core import SagaDefinition, ToolCatalogue
from saga_core.contracts import ErrorClass, Receipt
from sagafleet.example_sagas import payout_definition, payout_tool_catalogue
from workers.tools import Absent, LookupResult, ToolError, ToolRegistry, ToolSet

TABLES = (
    "CREATE TABLE IF NOT EXISTS test_payout_accounts (account text PRIMARY KEY, "
    "balance integer NOT NULL, settles boolean NOT NULL DEFAULT true)",
    "CREATE TABLE IF NOT EXISTS test_payout_ops (key text PRIMARY KEY, tool text NOT NULL, "
    "account text NOT NULL, amount integer NOT NULL, status text NOT NULL, "
    "n serial NOT NULL)",
    "CREATE TABLE IF NOT EXISTS test_payout_gates (tool text PRIMARY KEY, "
    "state text NOT NULL DEFAULT 'hold')",
)


def _catalogue() -> ToolCatalogue:
    """The payout catalogue with commit horizons of 1 s and a postcondition horizon of 2 s
    (timeouts and deadlines are the definition's, see :func:`definition`)."""
    document = payout_tool_catalogue().model_dump(mode="json")
    for tool in document["tools"]:
        tool["commit_horizon_s"] = 1
        tool.pop("timeout_s", None)
        tool.pop("deadline_s", None)
        if tool.get("postcondition"):
            tool["postcondition"]["horizon_s"] = 2
    return ToolCatalogue.model_validate(document)


CATALOGUE = _catalogue()
_QUICK_RETRY = {"max_attempts": 3, "base_delay_s": 0.05, "max_delay_s": 0.1}


def definition(version: int = 2, *, debit_timeout_s: float = 60, credit_timeout_s: float = 60,
               refund_deadline_s: float = 60) -> SagaDefinition:
    """The payout definition with quick retries and the given times (each test's version:
    a time a test does not wait for stays far longer than anything it does)."""
    data = payout_definition().model_dump(mode="json")
    data.pop("tools")
    data["version"] = version
    debit, credit = data["steps"]
    debit.update(timeout_s=debit_timeout_s, retry=_QUICK_RETRY)
    debit["compensation"]["deadline_s"] = refund_deadline_s
    credit.update(timeout_s=credit_timeout_s, retry=_QUICK_RETRY)
    return SagaDefinition.model_validate(data)


def install(database: str, balances: Mapping[str, int], *, unsettled: tuple[str, ...] = (),
            gated: tuple[str, ...] = ()) -> None:
    """Create the tables and the accounts."""
    with psycopg.connect(database, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(table)
        for account, balance in balances.items():
            conn.execute("INSERT INTO test_payout_accounts VALUES (%s, %s, %s)",
                         (account, balance, account not in unsettled))
        for tool in gated:
            conn.execute("INSERT INTO test_payout_gates (tool) VALUES (%s)", (tool,))


def ops(database: str) -> list[tuple[str, str, int, str]]:
    """Every committed operation as (tool, account, amount, status), oldest first."""
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT tool, account, amount, status FROM test_payout_ops "
                            "ORDER BY n").fetchall()
    return [(str(t), str(a), int(m), str(s)) for t, a, m, s in rows]


def _connect() -> psycopg.Connection[Any]:
    return psycopg.connect(os.environ["SAGAFLEET_DATABASE_URL"])


def _pass_gate(tool: str) -> None:
    """Wait while a test holds this tool's gate; refuse (nothing committed) if abandoned.

    The gate is a session advisory lock, waited for outside any transaction: an open
    transaction would hold back the snapshot horizon every subscriber (the sweeper's
    tracker among them) reads below."""
    with psycopg.connect(os.environ["SAGAFLEET_DATABASE_URL"], autocommit=True) as conn:
        row = conn.execute("SELECT state FROM test_payout_gates WHERE tool = %s",
                           (tool,)).fetchone()
        if row is None:
            return
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (tool,))
        (state,) = conn.execute("SELECT state FROM test_payout_gates WHERE tool = %s",
                                (tool,)).fetchone() or ("hold",)
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (tool,))
    if state == "abandon":
        raise ToolError(ErrorClass.TRANSIENT, f"{tool}: the bank gave up on this call")


def hold_gate(database: str, tool: str) -> psycopg.Connection[Any]:
    """Hold ``tool``'s gate: its calls hang until :func:`let_go`."""
    conn = psycopg.connect(database, autocommit=True)
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (tool,))
    return conn


def let_go(conn: psycopg.Connection[Any], tool: str) -> None:
    """Abandon the calls waiting at ``tool``'s gate (they commit nothing) and release it."""
    conn.execute("UPDATE test_payout_gates SET state = 'abandon' WHERE tool = %s", (tool,))
    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (tool,))
    conn.close()


def _receipt(key: str, row: tuple[Any, ...]) -> Receipt:
    tool, account, amount, status, n = row
    return Receipt(resource_id=f"{tool.split('.')[1]}-{n}", version=1, status=status,
                   fields={"account": account, "amount": amount, "balance": 0})


@dataclass(frozen=True)
class AccountTool:
    """One of the four tools: a row per key, its effect on the balance."""

    name: str

    def execute(self, args: Mapping[str, Any], key: str) -> Receipt:
        """Pass the gate, check the precondition, record the operation once per key."""
        account = str(args.get("account") or args.get("debit_id") or args.get("credit_id"))
        amount = int(args.get("amount", 0))
        _pass_gate(self.name)
        with _connect() as conn:
            found = conn.execute("SELECT tool, account, amount, status, n FROM test_payout_ops "
                                 "WHERE key = %s", (key,)).fetchone()
            if found is not None:
                return _receipt(key, found)  # the bank replays the stored answer
            status = "done"
            if self.name == "accounts.debit":
                (balance,) = conn.execute(
                    "SELECT balance FROM test_payout_accounts WHERE account = %s FOR UPDATE",
                    (account,)).fetchone() or (0,)
                wanted = args.get("balance_at_least")
                if wanted is not None and balance < int(wanted):
                    raise ToolError(ErrorClass.PRECONDITION_FAILED,
                                    f"balance of {account} is {balance}, below {wanted}")
                conn.execute("UPDATE test_payout_accounts SET balance = balance - %s "
                             "WHERE account = %s", (amount, account))
                status = "posted"
            elif self.name == "accounts.credit":
                known = conn.execute(
                    "SELECT settles FROM test_payout_accounts WHERE account = %s",
                    (account,)).fetchone()
                if known is None:
                    raise ToolError(ErrorClass.BUSINESS_REJECTION, f"no account {account!r}")
                settles = known[0]
                status = "settled" if settles else "pending"
            row = conn.execute(
                "INSERT INTO test_payout_ops (key, tool, account, amount, status) "
                "VALUES (%s, %s, %s, %s, %s) RETURNING tool, account, amount, status, n",
                (key, self.name, account, amount, status)).fetchone()
        if row is None:
            raise ToolError(ErrorClass.PERMANENT, f"{self.name}: nothing recorded for {key!r}")
        return _receipt(key, row)

    def lookup(self, key: str) -> LookupResult:
        """The operation under ``key`` as it stands now, or Absent."""
        with _connect() as conn:
            found = conn.execute("SELECT tool, account, amount, status, n FROM test_payout_ops "
                                 "WHERE key = %s", (key,)).fetchone()
        return _receipt(key, found) if found is not None else Absent(f"nothing under {key!r}")


def tool_set() -> ToolSet:
    """The four payout tools under the shortened catalogue."""
    return ToolSet(CATALOGUE, ToolRegistry({
        (t.name, t.version): AccountTool(t.name) for t in CATALOGUE.tools}))
