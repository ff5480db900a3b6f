"""``sagafleet anchor`` and the anchor part of ``sagafleet verify``: what they print, and exit
code 9 (log-tampered) naming what was changed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from events import EventStore, NewEvent
from sagafleet.anchor_key import anchor_key
from sagafleet.exit_codes import ExitCode
from sagafleet.migrate import migrate_all
from sagafleet.settings import Settings

pytestmark = pytest.mark.integration

KEY = "a key the database never sees, 32+"


@pytest.fixture
def logged(fresh_database: str) -> str:
    """A migrated database holding two streams."""
    migrate_all(fresh_database)
    with EventStore.connect(fresh_database, pool_size=2) as store:
        store.append("ledger-1", [NewEvent("Noted", {"n": n}) for n in range(3)])
        store.append("ledger-2", [NewEvent("Noted", {"n": n}) for n in range(2)])
        # The server is shared: another client's open transaction holds the horizon back.
        deadline = time.monotonic() + 30
        while store.horizon() != store.head_position():
            assert time.monotonic() < deadline, "the horizon did not reach the head in time"
            time.sleep(0.02)
    return fresh_database


def _run(database: str, home: Path, *args: str, key: str | None = KEY,
         key_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": database, "SAGAFLEET_HOME": str(home)}
    for name in ("SAGAFLEET_ANCHOR_KEY", "SAGAFLEET_ANCHOR_KEY_FILE", "SAGAFLEET_BROKER_URL"):
        env.pop(name, None)
    if key is not None:
        env["SAGAFLEET_ANCHOR_KEY"] = key
    if key_file is not None:
        env["SAGAFLEET_ANCHOR_KEY_FILE"] = str(key_file)
    return subprocess.run([sys.executable, "-m", "sagafleet", *args], env=env,  # noqa: S603
                          capture_output=True, text=True, timeout=120, check=False)


def _sql(database: str, statement: str) -> None:
    with EventStore.connect(database, pool_size=1) as store, store.connection() as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def test_anchor_then_verify_clean_then_a_deleted_stream_exits_9_naming_it(logged, tmp_path):
    # given a signed checkpoint of the log
    taken = _run(logged, tmp_path, "anchor", "--json")
    assert taken.returncode == ExitCode.OK, taken.stderr
    checkpoint = json.loads(taken.stdout)
    assert checkpoint["taken"] and checkpoint["seq"] == 1 and checkpoint["signed"]
    assert (checkpoint["events"], checkpoint["streams"]) == (5, 2)
    # when nothing changed, verify is clean and says what it checked
    clean = _run(logged, tmp_path, "verify", "--json")
    assert clean.returncode == ExitCode.OK, clean.stdout + clean.stderr
    doc = json.loads(clean.stdout)
    assert doc["ok"] and not doc["tampered"] and doc["anchors"]["ok"]
    assert doc["anchors"]["checkpoints"] == 1 and doc["anchors"]["events_not_anchored"] == 0
    # when a stream is deleted whole behind the store's back
    _sql(logged, "DELETE FROM eventstore.events WHERE stream_id = 'ledger-2'")
    _sql(logged, "DELETE FROM eventstore.streams WHERE stream_id = 'ledger-2'")
    tampered = _run(logged, tmp_path, "verify", "--json")
    # then verify exits 9 and its JSON names the stream and the checkpoint
    assert tampered.returncode == ExitCode.LOG_TAMPERED, tampered.stdout + tampered.stderr
    finding = json.loads(tampered.stdout)["anchors"]["findings"][0]
    assert finding["problem"] == "stream_deleted" and finding["stream_id"] == "ledger-2"
    assert finding["checkpoint"] == 1
    # and its text says so too
    text = _run(logged, tmp_path, "verify")
    assert text.returncode == ExitCode.LOG_TAMPERED
    assert "TAMPERED stream_deleted: stream 'ledger-2': checkpoint 1" in text.stdout


def test_a_wrong_key_and_no_key_are_said_plainly(logged, tmp_path):
    assert _run(logged, tmp_path, "anchor").returncode == ExitCode.OK
    wrong = _run(logged, tmp_path, "verify", "--json", key="another key, same length or so")
    assert wrong.returncode == ExitCode.LOG_TAMPERED
    assert json.loads(wrong.stdout)["anchors"]["findings"][0]["problem"] == "wrong_key"
    unkeyed = _run(logged, tmp_path, "verify", key=None)
    assert unkeyed.returncode == ExitCode.OK, unkeyed.stdout + unkeyed.stderr
    assert "signatures NOT checked" in unkeyed.stdout


def test_unsigned_checkpoints_say_what_they_cannot_prove(logged, tmp_path):
    taken = _run(logged, tmp_path, "anchor", key=None)
    assert taken.returncode == ExitCode.OK and "UNSIGNED" in taken.stdout
    result = _run(logged, tmp_path, "verify", key=None)
    assert result.returncode == ExitCode.OK
    assert "unsigned checkpoints (no key configured)" in result.stdout
    assert "not a deliberate recompute" in result.stdout


def test_the_newest_checkpoint_deleted_is_caught_with_the_copy_kept_elsewhere(logged, tmp_path):
    first = json.loads(_run(logged, tmp_path, "anchor", "--json").stdout)
    witness = f"{first['seq']}:{first['anchor_hash']}"
    _sql(logged, "DELETE FROM eventstore.anchors")
    _sql(logged, "DELETE FROM eventstore.anchor_heads")
    result = _run(logged, tmp_path, "verify", "--json", "--expect-anchor", witness)
    assert result.returncode == ExitCode.LOG_TAMPERED, result.stdout + result.stderr
    finding = json.loads(result.stdout)["anchors"]["findings"][0]
    assert finding["problem"] == "expected_checkpoint_absent" and finding["checkpoint"] == 1
    malformed = _run(logged, tmp_path, "verify", "--expect-anchor", "latest")
    assert malformed.returncode == ExitCode.INVALID_INPUT and "SEQ:HASH" in malformed.stderr


def test_a_missing_key_file_is_a_named_setup_error(logged, tmp_path):
    result = _run(logged, tmp_path, "anchor", "--json", key=None,
                  key_file=tmp_path / "nope.key")
    assert result.returncode == ExitCode.USAGE
    assert "anchor key file" in json.loads(result.stdout)["message"]


def test_the_embedded_default_makes_an_owner_only_key_file_once(tmp_path):
    # given the embedded database's settings and no key configured
    settings = Settings(home=tmp_path)
    # then verify finds no key, and the first checkpoint taker makes one, mode 0600
    assert anchor_key(settings, create=False) is None
    made = anchor_key(settings, create=True)
    assert made is not None
    path = tmp_path / "anchor.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # and every later reader gets the same key
    again = anchor_key(settings, create=True)
    assert again is not None and again.key_id == made.key_id
    assert [p.name for p in tmp_path.iterdir()] == ["anchor.key"]


def test_the_projector_takes_checkpoints_on_its_interval(logged, tmp_path):
    # given a projector anchoring every 200 ms
    env = {**os.environ, "SAGAFLEET_DATABASE_URL": logged, "SAGAFLEET_HOME": str(tmp_path),
           "SAGAFLEET_ANCHOR_KEY": KEY, "SAGAFLEET_ANCHOR_INTERVAL_SECONDS": "0.2"}
    env.pop("SAGAFLEET_BROKER_URL", None)
    projector = subprocess.Popen([sys.executable, "-m", "sagafleet", "projector"],  # noqa: S603
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # when it runs, the log it found is anchored, signed with the configured key
        with EventStore.connect(logged, pool_size=1) as store:
            deadline = time.monotonic() + 60
            while True:
                with store.connection() as conn:
                    row = conn.execute("SELECT count(*), sum(events) FROM eventstore.anchors"
                                       " WHERE signature IS NOT NULL").fetchone()
                if row is not None and row[1] == 5:
                    break
                assert projector.poll() is None, projector.stderr.read() if projector.stderr else ""
                assert time.monotonic() < deadline, "no checkpoint within 60 s"
                time.sleep(0.1)
    finally:
        projector.terminate()
        projector.wait(timeout=60)
    # then verify finds the log intact
    assert _run(logged, tmp_path, "verify").returncode == ExitCode.OK
