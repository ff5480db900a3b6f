"""``sagafleet anchor`` and the anchor part of ``sagafleet verify``: what they print, and exit
code 9 (log-tampered) naming what was changed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from psycopg.types.json import Jsonb

from events import GENESIS_HASH, EventStore, NewEvent
from events.eventstore.hashing import recorded_event_hash
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


def _rewrite(database: str, stream_id: str) -> None:
    """Change a stream's first event and recompute its chain and head, as an attacker would."""
    with EventStore.connect(database, pool_size=2) as store, store.connection() as conn:
        prev = GENESIS_HASH
        for event in store.read_stream(stream_id):
            data = {**event.data, "n": 1000} if event.stream_version == 1 else event.data
            digest = recorded_event_hash(replace(event, data=data, prev_hash=prev))
            conn.execute("UPDATE eventstore.events SET data = %s, prev_hash = %s,"
                         " event_hash = %s WHERE event_id = %s",
                         (Jsonb(data), prev, digest, event.event_id))
            prev = digest
        conn.execute("UPDATE eventstore.streams SET last_hash = %s WHERE stream_id = %s",
                     (prev, stream_id))


def test_every_checkpoint_deleted_and_a_stream_rewritten_exits_9_against_the_mark(
    logged, tmp_path
):
    # given a signed checkpoint, whose taker keeps the high-water mark in SAGAFLEET_HOME
    taken = json.loads(_run(logged, tmp_path, "anchor", "--json").stdout)
    marks = json.loads((tmp_path / "anchor.witness").read_text())["marks"]
    assert [m["seq"] for m in marks.values()] == [taken["seq"]]
    # when every checkpoint is deleted and a stream rewritten with recomputed hashes
    _sql(logged, "DELETE FROM eventstore.anchor_heads")
    _sql(logged, "DELETE FROM eventstore.anchors")
    _rewrite(logged, "ledger-1")
    # then verify exits 9, naming the checkpoint the mark kept
    result = _run(logged, tmp_path, "verify", "--json")
    assert result.returncode == ExitCode.LOG_TAMPERED, result.stdout + result.stderr
    (finding,) = json.loads(result.stdout)["anchors"]["findings"]
    assert finding["problem"] == "checkpoints_below_high_water_mark"
    assert finding["checkpoint"] == taken["seq"]
    text = _run(logged, tmp_path, "verify")
    assert "high-water mark kept outside the database: checkpoint 1" in text.stdout
    # and a checkpoint taker refuses to anchor the rewritten log afresh
    again = _run(logged, tmp_path, "anchor", "--json")
    assert again.returncode == ExitCode.FAILURE
    assert "high-water mark" in json.loads(again.stdout)["message"]
    assert _run(logged, tmp_path, "verify").returncode == ExitCode.LOG_TAMPERED


def test_a_clean_verify_keeps_its_own_record_of_the_mark(logged, tmp_path):
    # given checkpoints taken elsewhere (another home: its mark is not this verifier's)
    assert _run(logged, tmp_path / "taker", "anchor").returncode == ExitCode.OK
    # when a verifier with a home of its own finds the log whole
    verifier = tmp_path / "verifier"
    assert _run(logged, verifier, "verify").returncode == ExitCode.OK
    # then it keeps the newest checkpoint as its mark, and deleting it is caught next time
    assert (verifier / "anchor.witness").exists()
    _sql(logged, "DELETE FROM eventstore.anchor_heads")
    _sql(logged, "DELETE FROM eventstore.anchors")
    result = _run(logged, verifier, "verify", "--json")
    assert result.returncode == ExitCode.LOG_TAMPERED, result.stdout + result.stderr
    problems = {f["problem"] for f in json.loads(result.stdout)["anchors"]["findings"]}
    assert problems == {"checkpoints_below_high_water_mark"}


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
