"""``sagafleet tools export`` describes the tools without a token: it serves nobody and acts
for nobody."""

from __future__ import annotations

import json
import subprocess
import sys


def test_tools_export_needs_no_token_and_offers_no_approval(fleet, server_env):
    # given no token anywhere in the environment
    assert "SAGAFLEET_TOKEN" not in server_env
    # when the function-calling schemas are exported
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "sagafleet", "tools", "export", "--format", "anthropic",
         "--json"], env=server_env, capture_output=True, text=True, timeout=120, check=False)
    # then it succeeds with every tool and the typed start function, and no approval
    assert done.returncode == 0, done.stderr
    names = [tool["name"] for tool in json.loads(done.stdout)]
    assert set(names) == {"list_sagas", "start_saga", "put_secret", "propose_plan",
                          "saga_status", "saga_wait", "saga_audit", "cancel_saga", "start_trip"}
