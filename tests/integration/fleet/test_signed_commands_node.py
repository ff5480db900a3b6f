"""The "Signed commands" scheme of docs/agents.md is what the fleet verifies: the documented layout
matches what the Python helper signs, and the Node.js example, run for real when ``node``
is on the machine, signs a command the fleet acts on."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from signed_agent import agent_signer, bare_celery, send
from trip_inputs import TRIP_INPUT, by_secret_ref

from application.command_signatures import verify_signed_command
from saga_core.access.signed_envelopes import ENVELOPE_FIELDS, SIGNED_FIELDS

PAGE = Path(__file__).resolve().parents[3] / "docs" / "agents.md"


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("## Signed commands")
    return text[start:text.index("\n## ", start + 1)]


def _table_names(section: str, header: str) -> list[str]:
    """The first column of the table whose header row starts with ``| header |``."""
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    names = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        names += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    return names


def _node_example() -> str:
    section = _section()
    start = section.index("```js\n") + len("```js\n")
    return section[start:section.index("```", start)]


def test_the_documented_layout_is_what_the_python_helper_signs_and_the_fleet_reads(fleet):
    # given the page's tables of the message and the envelope
    section = _section()
    assert _table_names(section, "kwarg") == list(SIGNED_FIELDS)
    assert _table_names(section, "field") == list(ENVELOPE_FIELDS)
    # when the Python helper signs a start
    signer = agent_signer(fleet, "acme", "travel-agent")
    name, kwargs = signer.start_saga("trip", {"nights": 2}, key="k")
    # then the message has the documented kwargs, all text
    assert sorted(kwargs) == sorted(SIGNED_FIELDS)
    assert all(isinstance(value, str) for value in kwargs.values())
    # and the envelope the documented fields, times as integers, the task named
    envelope = json.loads(kwargs["envelope"])
    assert sorted(envelope) == sorted(ENVELOPE_FIELDS)
    assert envelope["v"] == 1 and envelope["task"] == name
    assert all(type(envelope[t]) is int for t in ("issued_at", "expires_at"))
    # and the signature is base64url, unpadded, 86 characters, over the envelope's UTF-8
    # bytes, verifiable with the public key the directory keeps
    assert re.fullmatch(r"[A-Za-z0-9_-]{86}", kwargs["signature"])
    raw = base64.urlsafe_b64decode(kwargs["signature"] + "==")
    key = fleet.principals.signing_key(signer.kid)
    Ed25519PublicKey.from_public_bytes(key.public_key).verify(raw, kwargs["envelope"].encode())
    # and the fleet reads it as the key's principal
    verified = verify_signed_command(name, kwargs, fleet.principals)
    assert verified.principal.tenant == "acme" and verified.principal.name == "travel-agent"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on this machine")
def test_the_node_example_signs_a_command_the_fleet_acts_on(fleet, broker, workers, tmp_path):
    # given a worker, and an agent principal whose key the Node.js example is given
    workers.start(1)
    issued_for = agent_signer(fleet, "acme", "node-agent")  # adds the principal
    issued = fleet.principals.add_signing_key("acme", "node-agent")
    assert issued.private_key_pem is not None and issued_for.kid != issued.kid
    (tmp_path / "bot.pem").write_bytes(issued.private_key_pem)
    (tmp_path / "sign-command.js").write_text(_node_example())
    args = {"definition": "trip", "key": "from-node", "reason": "signed in Node",
            "input": by_secret_ref(fleet.client(tenant="acme"), TRIP_INPUT)}
    # when the page's example runs
    done = subprocess.run(
        ["node", str(tmp_path / "sign-command.js")], capture_output=True, text=True,  # noqa: S607
        timeout=60, check=False,
        env={"SAGAFLEET_KID": issued.kid, "SAGAFLEET_KEY_FILE": str(tmp_path / "bot.pem"),
             "SAGAFLEET_ARGS": json.dumps(args), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    kwargs = json.loads(done.stdout)
    # then the fleet's verifier reads it as the key's principal
    verified = verify_signed_command("sagafleet.commands.start_saga", kwargs, fleet.principals)
    assert verified.principal.name == "node-agent" and verified.envelope.args["key"] == "from-node"
    # and published through Celery it starts the saga, recorded as the Node agent
    send(bare_celery(broker), ("sagafleet.commands.start_saga", kwargs))
    client = fleet.client(tenant="acme")
    deadline = time.monotonic() + 60
    while (saga := client.find("from-node")) is None:
        assert time.monotonic() < deadline, "the Node-signed start never ran"
        time.sleep(0.2)
    started = fleet.repo.load_history(saga.saga_id).events[0]
    assert started.actor == "node-agent" and started.reason == "signed in Node"
