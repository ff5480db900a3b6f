"""People are principals: an admin issues tokens with ``sagafleet principals``; every operator
command acts as the principal its token proves, in its tenant, under its name — or is refused
(11: no valid token, 12: not allowed) with nothing recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from trip_inputs import TRIP_INPUT

from sagafleet.exit_codes import ExitCode


@pytest.fixture
def cli(fresh_database, broker_url):
    """``sagafleet`` on a fresh database, with no token unless a call gives one."""
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url}
    env.pop("SAGAFLEET_TOKEN", None)

    def run(*args: str, token: str | None = None,
            **extra: str) -> subprocess.CompletedProcess[str]:
        acting = {**env, **extra} if token is None else {**env, **extra, "SAGAFLEET_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=acting,
                              capture_output=True, text=True, timeout=120, check=False)

    assert run("db", "migrate").returncode == 0
    return run


def added(cli: Any, name: str, kind: str, *roles: str, tenant: str = "acme") -> str:
    """Add a principal with the command an admin runs; its token, printed once."""
    argv = ["principals", "add", name, "--kind", kind, "--tenant", tenant, "--json"]
    for role in roles:
        argv += ["--role", role]
    done = cli(*argv)
    assert done.returncode == 0, done.stdout + done.stderr
    token = json.loads(done.stdout)["token"]
    assert isinstance(token, str)
    return token


def started(cli: Any, token: str, key: str) -> dict[str, Any]:
    done = cli("start", "trip", "--input", json.dumps(TRIP_INPUT), "--key", key, "--json",
               token=token)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout))


def saga_events(database: str, saga_id: str) -> list[tuple[str, dict[str, Any]]]:
    with psycopg.connect(database) as conn:
        return [(kind, data) for kind, data in conn.execute(
            "SELECT event_type, data FROM eventstore.events WHERE stream_id = %s"
            " ORDER BY stream_version", (f"saga-{saga_id}",))]


def test_an_admin_bootstraps_principals_and_tokens_are_kept_only_as_digests(
    cli, fresh_database, tmp_path: Path
):
    # given a migrated database and nobody in it: an agent token is refused
    assert cli("start", "trip", "--input", "{}", token="sft_" + "x" * 43).returncode == (
        ExitCode.UNAUTHENTICATED)
    # when the admin adds an agent (token printed) and a person (token saved to a file)
    agent = added(cli, "booker", "agent", "agent")
    saved = tmp_path / "ada.token"
    person = cli("principals", "add", "ada", "--kind", "person", "--role", "approver",
                 "--tenant", "acme", "--save-token", str(saved))
    assert person.returncode == 0, person.stderr
    ada = saved.read_text().strip()
    assert ada not in person.stdout and oct(saved.stat().st_mode)[-3:] == "600"
    # then the agent starts a saga in its own tenant, under its own name
    saga = started(cli, agent, "boot-1")
    assert saga["tenant"] == "acme" and saga["created"]
    assert saga_events(fresh_database, saga["saga_id"])[0][1]["actor"] == "booker"
    # and no table of the directory holds either token, in any column: only digests
    with psycopg.connect(fresh_database) as conn:
        rows = [str(row) for table in ("principals", "principal_tokens", "signing_keys")
                for row in conn.execute(f"SELECT * FROM fleet.{table}")]  # noqa: S608
        digests = conn.execute("SELECT token_digest FROM fleet.principal_tokens").fetchall()
    assert rows and not [row for row in rows for token in (agent, ada) if token in row
                         or token.removeprefix("sft_") in row]
    assert len(digests) == 2 and all(len(digest) == 64 for (digest,) in digests)
    # and listing shows who is there, never a token
    listed = cli("principals", "list", "--tenant", "acme", "--json")
    names = [(p["name"], p["kind"], p["roles"]) for p in json.loads(listed.stdout)["principals"]]
    assert names == [("ada", "person", ["approver"]), ("booker", "agent", ["agent"])]
    assert agent not in listed.stdout and ada not in listed.stdout


def test_rotated_and_revoked_tokens_are_refused_with_exit_11_and_nothing_recorded(
    cli, fresh_database
):
    # given an operator's token, and a saga of the tenant
    agent = added(cli, "booker", "agent", "agent")
    first = added(cli, "carol", "person", "operator")
    saga = started(cli, agent, "revoke-1")
    before = saga_events(fresh_database, saga["saga_id"])
    # when the token is rotated, the old one is refused and the new one works
    rotated = cli("principals", "rotate", "carol", "--tenant", "acme", "--json")
    second = json.loads(rotated.stdout)["token"]
    refused = cli("cancel", saga["saga_id"], "--json", token=first)
    assert refused.returncode == ExitCode.UNAUTHENTICATED
    assert json.loads(refused.stdout)["error"] == "Unauthenticated"
    # and when carol is revoked, her new token is refused the same way, for every command
    revoked = cli("principals", "revoke", "carol", "--tenant", "acme", "--reason", "left")
    assert revoked.returncode == 0, revoked.stderr
    for argv in (["cancel", saga["saga_id"]], ["approve", saga["saga_id"], "capture_payment"],
                 ["resolve", saga["saga_id"], "resume", "--reason", "r"],
                 ["deny", saga["saga_id"], "capture_payment", "--reason", "r"]):
        done = cli(*argv, "--json", token=second)
        assert done.returncode == ExitCode.UNAUTHENTICATED, (argv, done.stdout, done.stderr)
        assert second not in done.stdout + done.stderr
    # then nothing was added to the saga's log
    assert saga_events(fresh_database, saga["saga_id"]) == before


def test_a_principal_without_the_role_is_refused_with_exit_12_and_nothing_recorded(
    cli, fresh_database
):
    # given an auditor (may read) and an approver (may read, and approve where a gate says)
    agent = added(cli, "booker", "agent", "agent")
    auditor = added(cli, "audrey", "person", "auditor")
    approver = added(cli, "ada", "person", "approver")
    saga = started(cli, agent, "roles-1")
    before = saga_events(fresh_database, saga["saga_id"])
    # when each tries what no role of theirs allows
    for token, argv in ((auditor, ["cancel", saga["saga_id"]]),
                        (auditor, ["resolve", saga["saga_id"], "resume", "--reason", "r"]),
                        (approver, ["start", "trip", "--input", json.dumps(TRIP_INPUT)]),
                        (approver, ["dead-letters", "discard", "1", "--reason", "r"])):
        done = cli(*argv, "--json", token=token)
        # then it is refused as forbidden, naming the role it lacks
        assert done.returncode == ExitCode.FORBIDDEN, (argv, done.stdout, done.stderr)
        assert json.loads(done.stdout)["error"] == "NotPermitted"
    # and nothing was recorded: the saga is as it was, and no other saga was started
    assert saga_events(fresh_database, saga["saga_id"]) == before
    with psycopg.connect(fresh_database) as conn:
        streams = conn.execute("SELECT count(DISTINCT stream_id) FROM eventstore.events"
                               " WHERE stream_id LIKE 'saga-%'").fetchone()
    assert streams == (1,)


def test_the_recorded_actor_and_tenant_are_the_principals_whatever_else_is_typed(
    cli, fresh_database
):
    # given a saga of acme and carol, an operator of acme
    saga = started(cli, added(cli, "booker", "agent", "agent"), "actor-1")
    carol = added(cli, "carol", "person", "operator")
    # when a name is typed the old way, the command refuses it before doing anything
    typed = cli("cancel", saga["saga_id"], "--as", "mallory", token=carol)
    assert typed.returncode == ExitCode.USAGE
    # when carol cancels with another tenant in the environment
    done = cli("cancel", saga["saga_id"], "--reason", "customer called", "--json",
               token=carol, SAGAFLEET_TENANT="globex")
    # then the saga of her own tenant is cancelled, recorded under her name
    assert done.returncode == 0, done.stdout + done.stderr
    cancels = [data for kind, data in saga_events(fresh_database, saga["saga_id"])
               if kind == "CancelRequested"]
    assert [c["actor"] for c in cancels] == ["carol"]
    assert all(data.get("actor") != "mallory"
               for _, data in saga_events(fresh_database, saga["saga_id"]))


def test_signing_keys_are_issued_listed_and_revoked(cli, fresh_database, tmp_path: Path):
    added(cli, "booker", "agent", "agent")
    # when the admin generates a key pair for the agent, saving the private key
    pem = tmp_path / "booker.pem"
    made = cli("principals", "keys", "add", "booker", "--tenant", "acme",
               "--save-private-key", str(pem), "--json")
    assert made.returncode == 0, made.stderr
    kid = json.loads(made.stdout)["kid"]
    # then only the agent holds the private key; the directory holds the public one
    assert "PRIVATE KEY" in pem.read_text() and "PRIVATE KEY" not in made.stdout
    with psycopg.connect(fresh_database) as conn:
        kept = conn.execute("SELECT length(public_key) FROM fleet.signing_keys"
                            " WHERE kid = %s", (kid,)).fetchone()
    assert kept == (32,)
    listed = json.loads(cli("principals", "list", "--tenant", "acme", "--json").stdout)
    assert listed["principals"][0]["signing_keys"] == [kid]
    # and once revoked, the key is no longer listed as live
    assert cli("principals", "keys", "revoke", kid).returncode == 0
    listed = json.loads(cli("principals", "list", "--tenant", "acme", "--json").stdout)
    assert listed["principals"][0]["signing_keys"] == []
    # and names, roles and unknown principals are typed errors
    assert cli("principals", "add", "x y", "--kind", "person", "--role", "approver",
               "--tenant", "acme").returncode == ExitCode.INVALID_INPUT
    assert cli("principals", "add", "booker", "--kind", "agent", "--role", "agent",
               "--tenant", "acme").returncode == ExitCode.CONFLICT
    assert cli("principals", "rotate", "nobody", "--tenant", "acme").returncode == (
        ExitCode.NOT_FOUND)
