"""``sagafleet secrets put``: the value from stdin or a file, never argv; typed errors that
never quote it; the ref it prints starts a saga (and only one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from principal_support import issue_token
from trip_inputs import TRIP_INPUT

from sagafleet.migrate import migrate_all

TOKEN = "tok_CLIPUT_6d1e8b2a44_leakcheck"


@pytest.fixture
def run(fresh_database, broker_url):
    migrate_all(fresh_database)
    # acting as an agent of tenant acme (its API token in SAGAFLEET_TOKEN)
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": fresh_database,
           "SAGAFLEET_BROKER_URL": broker_url,
           "SAGAFLEET_TOKEN": issue_token(fresh_database, "acme-agent", ["agent"],
                                          tenant="acme")}

    def invoke(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env, input=stdin,
                              capture_output=True, text=True, timeout=120, check=False)

    return invoke


def test_a_ref_put_from_stdin_starts_one_saga_and_the_value_is_never_printed(run):
    # given a token deposited from stdin (as a pipe: no prompt)
    put = run("secrets", "put", "--json", stdin=TOKEN + "\n")
    assert put.returncode == 0, put.stderr
    ref = json.loads(put.stdout)["secret_ref"]
    assert set(ref) == {"$secret_ref"} and TOKEN not in put.stdout + put.stderr
    # when a start names the ref in the secret field, twice with the same key
    data = json.dumps({**TRIP_INPUT, "card_token": ref})
    first = run("start", "trip", "--input", data, "--key", "k1", "--json")
    again = run("start", "trip", "--input", data, "--key", "k1", "--json")
    # then the first starts the saga and the second finds it (the ref is spent by then)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert json.loads(first.stdout)["created"] and not json.loads(again.stdout)["created"]
    assert json.loads(again.stdout)["saga_id"] == json.loads(first.stdout)["saga_id"]
    # and another key cannot use the spent ref: exit 3, naming the field
    other = run("start", "trip", "--input", data, "--key", "k2", "--json")
    assert other.returncode == 3
    assert json.loads(other.stdout)["error"] == "SecretRefRejected"
    assert "input.card_token" in json.loads(other.stdout)["message"]


def test_bad_values_and_options_are_typed_errors_that_never_quote_the_value(run, tmp_path: Path):
    empty = run("secrets", "put", stdin="")
    assert empty.returncode == 3 and "empty" in empty.stderr
    not_json = run("secrets", "put", "--format", "json", "--json", stdin="{" + TOKEN)
    assert not_json.returncode == 3 and TOKEN not in not_json.stdout + not_json.stderr
    ttl = run("secrets", "put", "--ttl", "0", stdin=TOKEN)
    assert ttl.returncode == 2 and "--ttl" in ttl.stderr
    missing = run("secrets", "put", "--file", str(tmp_path / "nope"))
    assert missing.returncode == 4
    secret_file = tmp_path / "token.json"
    secret_file.write_text(json.dumps({"pin": 1234}))
    from_file = run("secrets", "put", "--file", str(secret_file), "--format", "json")
    assert from_file.returncode == 0 and '"$secret_ref"' in from_file.stdout
