"""Whole-log tamper evidence: signed checkpoints catch what per-stream chains cannot.

Each tampering test changes the database with raw SQL, as someone with write access to it
(but not the anchor key) would, then checks that the audit names the kind, the stream and
the checkpoint."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import psycopg
import pytest

from events import GENESIS_HASH, EventStore, NewEvent, verify_chain
from events.eventstore.hashing import chain_hash, hash_body, recorded_event_hash
from events.integrity.anchor_audit import AnchorProblem, AnchorReport, audit_anchors
from events.integrity.anchor_reading import load_checkpoints
from events.integrity.anchors import AnchorKey, AnchorLoop, Checkpoint, anchor_hash, take_checkpoint

pytestmark = pytest.mark.integration

KEY = AnchorKey(b"the anchor key, kept off the db!")


def _write(store: EventStore, streams: dict[str, int]) -> None:
    for stream_id, count in streams.items():
        store.append(stream_id, [NewEvent("Noted", {"stream": stream_id, "n": n})
                                 for n in range(count)])


def wait_final(store: EventStore, timeout: float = 30.0) -> None:
    """Wait until every committed event is below the horizon. The server is shared: another
    client's open transaction holds the horizon back for every database on it."""
    deadline = time.monotonic() + timeout
    while store.horizon() != store.head_position():
        assert time.monotonic() < deadline, "the horizon did not reach the head in time"
        time.sleep(0.02)


def _take_final(store: EventStore, key: AnchorKey | None) -> Checkpoint | None:
    """A checkpoint of everything committed so far."""
    wait_final(store)
    return take_checkpoint(store, key)


def _anchored_log(store: EventStore) -> None:
    """Three streams over two signed checkpoints."""
    _write(store, {"a": 3, "b": 2})
    assert _take_final(store, KEY) is not None
    _write(store, {"a": 2, "c": 4})
    assert _take_final(store, KEY) is not None


def _sql(store: EventStore, statement: str, params: tuple[object, ...] = ()) -> None:
    with store.connection() as conn:
        conn.execute(statement, params)  # type: ignore[arg-type]


def _problems(report: AnchorReport) -> set[tuple[AnchorProblem, str | None]]:
    return {(f.problem, f.stream_id) for f in report.findings}


def test_a_clean_log_verifies_clean_and_counts_what_is_not_anchored_yet(store):
    # given a log anchored by two signed checkpoints
    _anchored_log(store)
    # when it is audited
    report = audit_anchors(store, KEY)
    # then nothing is found and every event is anchored
    assert report.ok, report.findings
    assert (report.checkpoints, report.signed, report.signatures_checked) == (2, 2, True)
    assert (report.events_anchored, report.events_not_anchored) == (11, 0)
    # and an event written after the last checkpoint is reported as not yet anchored
    _write(store, {"d": 1})
    later = audit_anchors(store, KEY)
    assert later.ok and later.events_not_anchored == 1
    # and nothing new means no new checkpoint until that event is anchored
    assert _take_final(store, KEY) is not None
    assert take_checkpoint(store, KEY) is None
    assert audit_anchors(store, KEY).events_not_anchored == 0


def test_a_stream_deleted_whole_is_named(store):
    _anchored_log(store)
    # when stream b disappears, events and head alike
    _sql(store, "DELETE FROM eventstore.events WHERE stream_id = 'b'")
    _sql(store, "DELETE FROM eventstore.streams WHERE stream_id = 'b'")
    report = audit_anchors(store, KEY)
    assert _problems(report) == {(AnchorProblem.STREAM_DELETED, "b")}
    assert report.findings[0].checkpoint == 1 and "gone" in report.findings[0].message


def test_a_truncated_log_is_named_stream_by_stream(store):
    _anchored_log(store)
    # when the newest three events of the log are deleted and the heads moved back to match
    # (every remaining chain then verifies)
    _sql(store, "DELETE FROM eventstore.events WHERE global_position IN (SELECT"
                " global_position FROM eventstore.events ORDER BY global_position DESC LIMIT 3)")
    _sql(store, "UPDATE eventstore.streams s SET version = e.stream_version, last_hash ="
                " e.event_hash FROM eventstore.events e WHERE e.stream_id = s.stream_id AND"
                " e.stream_version = (SELECT max(stream_version) FROM eventstore.events x"
                " WHERE x.stream_id = s.stream_id)")
    assert verify_chain(store, "c").ok
    report = audit_anchors(store, KEY)
    assert _problems(report) == {(AnchorProblem.STREAM_TRUNCATED, "c")}
    assert "now ends at version 1" in report.findings[0].message
    assert report.findings[0].checkpoint == 2


def test_a_stream_rewritten_with_recomputed_hashes_is_named(store):
    _anchored_log(store)
    # when stream a's first event is changed and its whole chain recomputed with the
    # project's own hash functions, as an attacker would
    events = store.read_stream("a")
    prev = GENESIS_HASH
    for event in events:
        data = {**event.data, "n": 1000} if event.stream_version == 1 else event.data
        digest = recorded_event_hash(replace(event, data=data, prev_hash=prev))
        _sql(store, "UPDATE eventstore.events SET data = %s::jsonb, prev_hash = %s,"
                    " event_hash = %s WHERE event_id = %s",
             (json.dumps(data), prev, digest, event.event_id))
        prev = digest
    _sql(store, "UPDATE eventstore.streams SET last_hash = %s WHERE stream_id = 'a'", (prev,))
    # then the stream's own chain cannot tell, but the checkpoints can
    assert verify_chain(store, "a").ok
    report = audit_anchors(store, KEY)
    assert _problems(report) == {(AnchorProblem.STREAM_REWRITTEN, "a")}
    assert report.findings[0].checkpoint == 2  # the newest checkpoint naming stream a


def test_an_edited_checkpoint_is_named_and_a_recomputed_one_fails_its_signature(store):
    _anchored_log(store)
    # when a head row of checkpoint 1 is edited to match a rewritten stream
    _sql(store, "UPDATE eventstore.anchor_heads SET events = 9 WHERE seq = 1 AND stream_id = 'b'")
    report = audit_anchors(store, KEY)
    assert (AnchorProblem.CHECKPOINT_EDITED, None) in _problems(report)
    assert any(f.checkpoint == 1 for f in report.findings)
    # and when its hash is recomputed too (the attacker knows the format, not the key)
    with store.connection() as conn:
        first = load_checkpoints(conn)[0]
    forged = anchor_hash(seq=1, prev_hash=first.prev_hash, after=first.after, upto=first.upto,
                         events=first.events, taken_at=first.taken_at, heads=first.heads)
    _sql(store, "UPDATE eventstore.anchors SET anchor_hash = %s WHERE seq = 1", (forged,))
    problems = {f.problem for f in audit_anchors(store, KEY).findings}
    # then the signature no longer matches, and checkpoint 2 no longer continues it
    assert AnchorProblem.SIGNATURE_INVALID in problems
    assert AnchorProblem.CHECKPOINT_CHAIN_BROKEN in problems
    assert AnchorProblem.CHECKPOINT_EDITED not in problems
    # without the key, the chain still gives it away
    assert AnchorProblem.CHECKPOINT_CHAIN_BROKEN in {
        f.problem for f in audit_anchors(store, None).findings}


def test_a_deleted_checkpoint_is_named(store):
    _anchored_log(store)
    _write(store, {"d": 1})
    assert _take_final(store, KEY) is not None
    newest = audit_anchors(store, KEY)
    # when the middle checkpoint is deleted
    _sql(store, "DELETE FROM eventstore.anchors WHERE seq = 2")
    report = audit_anchors(store, KEY)
    assert report.findings[0].problem is AnchorProblem.CHECKPOINT_MISSING
    assert report.findings[0].checkpoint == 2
    # and the newest deleted is caught by a copy of its seq and hash kept elsewhere
    _sql(store, "DELETE FROM eventstore.anchors WHERE seq = 3")
    assert newest.last_seq == 3 and newest.last_hash is not None
    witnessed = audit_anchors(store, KEY, expect=(3, newest.last_hash))
    assert AnchorProblem.EXPECTED_CHECKPOINT_ABSENT in {f.problem for f in witnessed.findings}


def test_a_forged_stream_inserted_below_a_checkpoint_is_named(store):
    _anchored_log(store)
    # when a new stream with a valid chain is inserted at an old place in the log (the
    # position and transaction id of an anchored event's neighbourhood)
    with store.connection() as conn:
        xid, position = conn.execute(
            "SELECT transaction_id::text, global_position FROM eventstore.events"
            " ORDER BY global_position LIMIT 1").fetchone()  # type: ignore[misc]
    event_id = str(uuid.uuid4())
    data = {"refund_to": "attacker"}
    # (a row inserted without naming its hash version is layout 1: the content alone)
    digest = chain_hash(GENESIS_HASH, hash_body(
        hash_version=1, stream_id="forged", stream_version=1, event_id=event_id,
        event_type="Noted", schema_version=1, data=data, metadata={}, tenant_id=None,
        recorded_at=datetime.now(UTC)))
    _sql(store, "INSERT INTO eventstore.events (global_position, transaction_id, stream_id,"
                " stream_version, event_id, event_type, schema_version, data, prev_hash,"
                " event_hash) OVERRIDING SYSTEM VALUE VALUES (%s, %s::text::xid8, 'forged', 1,"
                " %s, 'Noted', 1, %s::jsonb, %s, %s)",
         (-int(position), xid, event_id, json.dumps(data), GENESIS_HASH, digest))
    _sql(store, "INSERT INTO eventstore.streams (stream_id, version, last_hash)"
                " VALUES ('forged', 1, %s)", (digest,))
    assert verify_chain(store, "forged").ok
    report = audit_anchors(store, KEY)
    assert _problems(report) == {(AnchorProblem.SLICE_MISMATCH, "forged")}
    assert report.findings[0].checkpoint == 1
    assert report.findings[0].position == str(-int(position))
    assert "does not name" in report.findings[0].message


def test_a_wrong_key_is_reported_and_no_key_says_signatures_are_not_checked(store):
    _anchored_log(store)
    other = AnchorKey(b"somebody else's key, not ours!!!")
    report = audit_anchors(store, other)
    assert {f.problem for f in report.findings} == {AnchorProblem.WRONG_KEY}
    assert KEY.key_id in report.findings[0].message and other.key_id in report.findings[0].message
    unkeyed = audit_anchors(store, None)
    assert unkeyed.ok and not unkeyed.signatures_checked
    assert "NOT checked" in unkeyed.protection


def test_unsigned_checkpoints_still_chain_and_say_so(store):
    _write(store, {"a": 2})
    taken = _take_final(store, None)
    assert taken is not None and not taken.signed
    report = audit_anchors(store, None)
    assert report.ok and report.protection.startswith("unsigned")
    # but once a key is configured, an unsigned checkpoint is a finding
    assert {f.problem for f in audit_anchors(store, KEY).findings} == {AnchorProblem.UNSIGNED}


def test_checkpoints_stay_below_the_horizon_of_an_open_append(store):
    # given an append held open in its own transaction, and a later one committed
    _write(store, {"a": 1})
    wait_final(store)
    with psycopg.connect(store.conninfo) as held:
        store.append("held", [NewEvent("Noted", {})], conn=held)
        _write(store, {"b": 1})
        # when a checkpoint is taken meanwhile, it covers only what is below the horizon
        # (stream a; or nothing, if another client of this shared server holds it back)
        first = take_checkpoint(store, KEY)
        assert first is None or {h.stream_id for h in first.heads} == {"a"}
        held.commit()
    # then the next one covers the late commit and the later append, and all verifies
    second = _take_final(store, KEY)
    assert second is not None and {"held", "b"} <= {h.stream_id for h in second.heads}
    assert audit_anchors(store, KEY).ok


def test_two_takers_at_once_build_one_unbroken_chain(store):
    _write(store, {f"s{n}": 2 for n in range(20)})
    wait_final(store)
    taken = []

    def take() -> None:
        taken.append(take_checkpoint(store, KEY))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [c.seq for c in taken if c is not None] == [1]
    report = audit_anchors(store, KEY)
    assert report.ok and report.checkpoints == 1 and report.events_not_anchored == 0


def test_the_anchor_loop_takes_checkpoints_until_stopped(store):
    # given a loop anchoring every 50 ms
    loop = AnchorLoop(store, KEY, 0.05).start()
    try:
        # when events arrive in two bursts
        _write(store, {"a": 2})
        _wait_until(lambda: audit_anchors(store, KEY).events_not_anchored == 0)
        _write(store, {"b": 2})
        _wait_until(lambda: audit_anchors(store, KEY).events_not_anchored == 0)
    finally:
        loop.stop()
    # then both are anchored, in an unbroken signed chain
    report = audit_anchors(store, KEY)
    assert report.ok and report.checkpoints == loop.taken >= 2 and report.events_anchored == 4


def _wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_database_without_pg_control_system_is_still_named_by_its_oid(fresh_database):
    # given a login role for which pg_control_system() is not granted (some managed services)
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from events.integrity.anchor_witness import database_identity

    role = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(fresh_database, autocommit=True) as admin:
        full = database_identity(admin)
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute("REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC")
        try:
            params = {**conninfo_to_dict(fresh_database), "user": role}
            params.pop("password", None)
            with psycopg.connect(make_conninfo("", **params), autocommit=True) as conn:
                # then the identity falls back to the database's oid, and the session goes on
                named = database_identity(conn)
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
    assert named == "cluster?/" + full.split("/")[1]
