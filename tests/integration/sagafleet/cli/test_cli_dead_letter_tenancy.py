"""Dead letters answer only to their tenant on the command line: an operator lists, opens,
requeues and discards its own tenant's letters, and another tenant's — or one whose tenant is
unknown — is "not found" (exit 4) and stays as it was; only the fleet_operator role sees the
letters no tenant is proven to own; ``stats`` counts the token's tenant's letters alone
(real PostgreSQL and Redis, ``sagafleet`` as a process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from events import EventStore
from saga_core.errors import ErrorKind
from sagafleet.exit_codes import ExitCode
from workers.dead_letters.store import DeadLetters, dead_letter_body

START = "sagafleet.commands.start_saga"


@pytest.fixture
def cli(fresh_database, broker_url):
    """``sagafleet`` on a fresh, migrated database, with no token unless a call gives one."""
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url}
    env.pop("SAGAFLEET_TOKEN", None)

    def run(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        acting = env if token is None else {**env, "SAGAFLEET_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=acting,
                              capture_output=True, text=True, timeout=120, check=False)

    assert run("db", "migrate").returncode == 0
    return run


def _token(cli: Any, name: str, role: str, tenant: str) -> str:
    done = cli("principals", "add", name, "--kind", "person", "--role", role, "--tenant",
               tenant, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return str(json.loads(done.stdout)["token"])


def _letters(database: str) -> dict[str | None, int]:
    """One open letter of acme, one of globex and one of no proven tenant: tenant -> id."""
    with EventStore.connect(database, pool_size=1) as store:
        letters = DeadLetters(store)
        for n, (tenant, refusal) in enumerate((("acme", None), ("globex", "replayed"),
                                               (None, "unsigned"))):
            body = dead_letter_body(START, [], {"envelope": json.dumps(
                {"args": {"definition": f"secret-plan-of-{tenant}"}})})
            assert letters.record(START, f"task-{n}", body, f"why {tenant}",
                                  ErrorKind.NOT_FOUND, tenant=tenant, refusal=refusal)
    with psycopg.connect(database) as conn:
        return {tenant: letter_id for letter_id, tenant in conn.execute(
            "SELECT id, tenant FROM fleet.dead_letters")}


def _status(database: str, letter_id: int) -> tuple[str, str | None]:
    with psycopg.connect(database) as conn:
        row = conn.execute("SELECT status, resolved_by FROM fleet.dead_letters WHERE id = %s",
                           (letter_id,)).fetchone()
    assert row is not None
    return row[0], row[1]


def test_an_operator_sees_and_resolves_only_its_tenants_dead_letters(cli, fresh_database):
    # given an open letter of acme, one of globex and one of no proven tenant, and an
    # operator of acme
    ids = _letters(fresh_database)
    olga = _token(cli, "olga", "operator", "acme")

    # when she lists the dead letters
    listed = cli("dead-letters", "--json", token=olga)
    # then she sees acme's letter alone, with its tenant
    assert listed.returncode == 0, listed.stderr
    assert [(letter["id"], letter["tenant"]) for letter in json.loads(listed.stdout)] == [
        (ids["acme"], "acme")]
    assert "globex" not in listed.stdout and "secret-plan-of-None" not in listed.stdout
    text = cli("dead-letters", token=olga)
    assert f"#{ids['acme']}" in text.stdout and f"#{ids['globex']}" not in text.stdout

    # when she opens, requeues or discards globex's letter or the unknown tenant's
    for other in (ids["globex"], ids[None]):
        for argv in (["show", str(other)], ["requeue", str(other), "--reason", "mine?"],
                     ["discard", str(other), "--reason", "mine?"]):
            done = cli("dead-letters", *argv, "--json", token=olga)
            # then it is not found, as a letter that never existed, and nothing of it shows
            assert done.returncode == ExitCode.NOT_FOUND, (argv, done.stdout, done.stderr)
            assert json.loads(done.stdout)["error"] == "DeadLetterNotFound"
            assert "secret-plan" not in done.stdout + done.stderr
            # (word for word what an id that was never used answers)
            assert json.loads(done.stdout)["message"].startswith(f"no dead letter {other}")
        # and the letter is still open, resolved by nobody
        assert _status(fresh_database, other) == ("open", None)

    # when she shows and discards her own tenant's letter, it works as before
    shown = cli("dead-letters", "show", str(ids["acme"]), "--json", token=olga)
    assert shown.returncode == 0 and json.loads(shown.stdout)["tenant"] == "acme"
    done = cli("dead-letters", "discard", str(ids["acme"]), "--reason", "test", "--json",
               token=olga)
    assert done.returncode == 0, done.stderr
    assert _status(fresh_database, ids["acme"]) == ("discarded", "olga")


def test_only_the_fleet_operator_sees_letters_no_tenant_is_proven_to_own(cli, fresh_database):
    # given the three letters, a fleet operator (of the platform's own tenant) and an
    # auditor of acme
    ids = _letters(fresh_database)
    pat = _token(cli, "pat", "fleet_operator", "fleet")
    aude = _token(cli, "aude", "auditor", "acme")

    # when the fleet operator lists the dead letters
    listed = cli("dead-letters", "--json", token=pat)
    # then it sees the letter of unknown tenant, and no tenant's
    assert listed.returncode == 0, listed.stderr
    assert [(letter["id"], letter["tenant"]) for letter in json.loads(listed.stdout)] == [
        (ids[None], None)]
    assert "(unknown tenant)" in cli("dead-letters", token=pat).stdout
    for tenant in ("acme", "globex"):
        refused = cli("dead-letters", "show", str(ids[tenant]), "--json", token=pat)
        assert refused.returncode == ExitCode.NOT_FOUND, refused.stdout
    # and it resolves it
    done = cli("dead-letters", "discard", str(ids[None]), "--reason", "forged", "--json",
               token=pat)
    assert done.returncode == 0, done.stderr
    assert _status(fresh_database, ids[None]) == ("discarded", "pat")

    # when a reader without the operator role, or nobody at all, asks for the letters
    # then it is refused (12, 11), whatever letter it names
    for argv in (["dead-letters"], ["dead-letters", "show", str(ids["acme"])]):
        assert cli(*argv, "--json", token=aude).returncode == ExitCode.FORBIDDEN
        assert cli(*argv, "--json").returncode == ExitCode.UNAUTHENTICATED


def test_stats_counts_the_tokens_tenants_dead_letters_alone(cli, fresh_database):
    # given a letter of acme, one of globex and one of unknown tenant
    _letters(fresh_database)
    # when each tenant's operator asks for its stats
    counts = {}
    for name, tenant in (("olga", "acme"), ("gus", "globex"), ("pat", "fleet")):
        role = "fleet_operator" if tenant == "fleet" else "operator"
        done = cli("stats", "--json", token=_token(cli, name, role, tenant))
        assert done.returncode == 0, done.stderr
        counts[tenant] = json.loads(done.stdout)["metrics"]["dead_letters"]
    # then each counts its own tenant's letters: none of another's, none of no tenant's
    assert counts["acme"] == {"recorded": 1, "open": 1, "refused": {}}
    assert counts["globex"] == {"recorded": 1, "open": 1, "refused": {"replayed": 1}}
    assert counts["fleet"] == {"recorded": 0, "open": 0, "refused": {}}
