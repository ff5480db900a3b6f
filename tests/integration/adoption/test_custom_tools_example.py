"""examples/custom_tools, run end to end the way its README says, so it cannot rot: the
providers installed, a tenant's admin and agent added, the definition registered against the
example's catalogue, a real ``sagafleet worker`` running only the example's tools, and two
sagas started and waited for on the command line — one completes, one is refused at the
pivot and compensated in reverse order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from sagafleet.exit_codes import ExitCode
from sagafleet.processes import spawn_sagafleet, stop_processes

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "custom_tools"


@pytest.fixture
def example_env(fresh_database: str, broker: str) -> dict[str, str]:
    """The environment the example's README sets: the fleet's servers, the example's tool set
    on PYTHONPATH, nothing of the sandbox."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SAGAFLEET_")}
    env.update({
        "SAGAFLEET_DATABASE_URL": fresh_database,
        "SAGAFLEET_BROKER_URL": broker,
        "SAGAFLEET_TOOLS": "onboarding_tools:tool_set",
        "SAGAFLEET_SWEEP_INTERVAL_SECONDS": "0.5",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLE), env.get("PYTHONPATH")])),
    })
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False, cwd=EXAMPLE)


def _sagafleet(env: dict[str, str], *args: str) -> dict:
    done = _run(env, "-m", "sagafleet", *args, "--json")
    assert done.returncode == ExitCode.OK, f"sagafleet {' '.join(args)}: {done.stderr}{done.stdout}"
    return json.loads(done.stdout)


def _effects(database: str) -> list[tuple[str, str]]:
    with psycopg.connect(database) as conn:
        return [(tool, status) for tool, status in conn.execute(
            "SELECT tool, status FROM onboarding.effects ORDER BY created_at, tool").fetchall()]


def test_the_custom_tools_example_runs_as_its_readme_says(example_env, fresh_database,
                                                          tmp_path) -> None:
    env = example_env
    # given the schema, the example's providers and a tenant's admin and agent
    assert _run(env, "-m", "sagafleet", "db", "migrate").returncode == ExitCode.OK
    installed = _run(env, "onboarding_tools.py", "install")
    assert installed.returncode == 0, installed.stderr
    admin, bot = tmp_path / "admin.token", tmp_path / "bot.token"
    _sagafleet(env, "principals", "add", "ops-admin", "--kind", "person", "--role", "admin",
               "--tenant", "acme", "--save-token", str(admin))
    _sagafleet(env, "principals", "add", "onboarding-bot", "--kind", "agent", "--role",
               "agent", "--tenant", "acme", "--save-token", str(bot))

    # when the admin registers the definition, checked against the example's catalogue
    registered = _sagafleet(env, "register", "onboarding.yaml", "--token-file", str(admin))
    assert (registered["name"], registered["version"]) == ("onboarding", 1)

    worker = spawn_sagafleet(["worker"], env, tmp_path / "worker.log")
    sweeper = spawn_sagafleet(["sweeper"], env, tmp_path / "sweeper.log")
    try:
        # and the agent starts one saga with the example's input, one whose mail bounces
        good = _sagafleet(env, "start", "onboarding", "--input", "@onboarding-input.json",
                          "--key", "onboard-ada", "--token-file", str(bot))
        bounced = _sagafleet(env, "start", "onboarding", "--input",
                             '{"email": "bob@mail.invalid", "plan": "solo"}',
                             "--key", "onboard-bob", "--token-file", str(bot))
        done = _sagafleet(env, "wait", good["saga_id"], "--timeout", "120",
                          "--token-file", str(bot))
        refused = _sagafleet(env, "wait", bounced["saga_id"], "--timeout", "120",
                             "--token-file", str(bot))
    finally:
        stop_processes([worker, sweeper])

    # then the first completed through the example's three providers
    assert done["saga"]["status"] == "COMPLETED", (tmp_path / "worker.log").read_text()
    # and the refusal at the pivot undid the ticket, then the account
    assert refused["saga"]["status"] == "COMPENSATED", (tmp_path / "worker.log").read_text()
    effects = _effects(fresh_database)
    assert effects.count(("email.send_welcome", "sent")) == 1
    assert effects.count(("crm.create_account", "open")) == 2
    assert effects.count(("tickets.open", "open")) == 2
    undone = [tool for tool, status in effects if status == "undone"]
    assert undone == ["tickets.cancel", "crm.close_account"]


def test_the_example_tool_set_refuses_to_load_without_its_providers(example_env) -> None:
    # given no database named for the providers
    env = {k: v for k, v in example_env.items()
           if k not in ("SAGAFLEET_DATABASE_URL", "ONBOARDING_DATABASE_URL")}
    # when its install is run, it names the variable to set
    done = _run(env, "onboarding_tools.py", "install")
    assert done.returncode != 0
    assert "ONBOARDING_DATABASE_URL" in done.stderr
