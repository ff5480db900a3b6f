"""Integrity of everything a decision reads (issue 31, part 5), on real PostgreSQL.

Each attack changes the database with raw SQL, as someone with write access to its tables
(but neither the anchor key nor the files outside the database) would; then ``verify``
names it, and ``audit`` of the saga says the same. The attacks: every checkpoint deleted
and a stream rewritten with recomputed hashes; a snapshot's state edited (naively, and
with its seal recomputed); an event's ``tenant_id`` or ``recorded_at`` edited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from projection_support import TripScript
from psycopg.types.json import Jsonb
from read_model_support import project_all

from events import GENESIS_HASH, EventStore, verify_chain
from events.definition_store.postgres import DefinitionStore
from events.eventstore.hashing import recorded_event_hash
from events.integrity.anchor_audit import AnchorAge, AnchorProblem
from events.integrity.anchor_witness import AnchorWitness, CheckpointChainLowered
from events.integrity.anchors import AnchorKey, take_checkpoint
from events.saga_log.postgres import PostgresSagaLog
from events.saga_log.snapshots import PostgresSnapshots, StoredSnapshot
from events.saga_log.streams import saga_stream
from projections import audit, verify
from projections.context import ProjectionContext
from projections.integrity import IntegrityChecks
from saga_core.contracts import SagaStatus
from saga_core.engine.state import RunStatus
from saga_core.engine.state_codec import SCHEMA

pytestmark = pytest.mark.integration

KEY = AnchorKey(b"the anchor key, kept off the db!")
MAX_AGE = timedelta(minutes=5)


def _sql(ctx: ProjectionContext, statement: str, params: tuple[object, ...] = ()) -> None:
    with ctx.connection() as conn:
        conn.execute(statement, params)  # type: ignore[arg-type]


def _wait_final(store: EventStore, timeout: float = 30.0) -> None:
    """Until every committed event is below the horizon (the server is shared: another
    client's open transaction holds the horizon back for every database on it)."""
    deadline = time.monotonic() + timeout
    while store.horizon() != store.head_position():
        assert time.monotonic() < deadline, "the horizon did not reach the head in time"
        time.sleep(0.02)


def _sagas(repo: PostgresSagaLog, ctx: ProjectionContext) -> tuple[str, str]:
    """Two completed trip sagas, projected: the one the attacks touch, and a bystander."""
    target, bystander = TripScript().completed(), TripScript().completed()
    for script in (target, bystander):
        script.write(repo)
    project_all(ctx)
    return target.saga_id, bystander.saga_id


def _rewrite(ctx: ProjectionContext, saga_id: str) -> None:
    """Change the first event's data and recompute the stream's whole chain and head with
    the project's own hash functions, as an attacker would."""
    prev = GENESIS_HASH
    for event in ctx.store.read_stream(saga_stream(saga_id)):
        data = ({**event.data, "input": {**event.data["input"], "amount": 1}}
                if event.stream_version == 1 else event.data)
        digest = recorded_event_hash(replace(event, data=data, prev_hash=prev))
        _sql(ctx, "UPDATE eventstore.events SET data = %s, prev_hash = %s, event_hash = %s"
                  " WHERE event_id = %s", (Jsonb(data), prev, digest, event.event_id))
        prev = digest
    _sql(ctx, "UPDATE eventstore.streams SET last_hash = %s WHERE stream_id = %s",
         (prev, saga_stream(saga_id)))


def _delete_every_checkpoint(ctx: ProjectionContext) -> None:
    _sql(ctx, "DELETE FROM eventstore.anchor_heads")
    _sql(ctx, "DELETE FROM eventstore.anchors")


def _problems(findings: list) -> set[AnchorProblem]:
    return {f.problem for f in findings}


def test_every_checkpoint_deleted_and_a_stream_rewritten_is_named_by_verify_and_audit(
    ctx: ProjectionContext, repo: PostgresSagaLog, tmp_path: Path
) -> None:
    # given two sagas anchored by a signed checkpoint, whose taker kept the high-water mark
    # in a file outside the database
    target, bystander = _sagas(repo, ctx)
    witness = AnchorWitness(tmp_path / "anchor.witness")
    _wait_final(ctx.store)
    taken = take_checkpoint(ctx.store, KEY, witness)
    assert taken is not None
    checks = IntegrityChecks(key=KEY, witness=witness)
    assert verify(ctx, checks=checks).ok
    # when every checkpoint is deleted and one saga's stream rewritten, hashes recomputed
    _delete_every_checkpoint(ctx)
    _rewrite(ctx, target)
    assert verify_chain(ctx.store, saga_stream(target)).ok  # the chain alone cannot tell
    # then verify fails, naming the checkpoint the mark recorded as gone
    report = verify(ctx, checks=checks)
    assert report.tampered and not report.ok
    assert report.anchors is not None
    (finding,) = report.anchors.findings
    assert finding.problem is AnchorProblem.BELOW_HIGH_WATER_MARK
    assert finding.checkpoint == taken.seq and "absent" in finding.message
    # and the saga's audit says the same (and so does the bystander's: the mark is the log's)
    for saga_id in (target, bystander):
        audited = audit(ctx, saga_id, tenant="default", checks=checks)
        assert audited.tampered and not audited.ok
        assert audited.anchors is not None
        assert _problems(audited.anchors.findings) == {AnchorProblem.BELOW_HIGH_WATER_MARK}
    # and a checkpoint taker refuses to anchor the rewritten log afresh
    with pytest.raises(CheckpointChainLowered, match=f"checkpoint {taken.seq}"):
        take_checkpoint(ctx.store, KEY, witness)
    assert verify(ctx, checks=checks).anchors.checkpoints == 0  # type: ignore[union-attr]


def test_without_the_mark_a_key_makes_old_unanchored_events_a_finding(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given a signed checkpoint of two sagas, and no high-water mark kept anywhere
    target, _ = _sagas(repo, ctx)
    _wait_final(ctx.store)
    assert take_checkpoint(ctx.store, KEY) is not None
    times = [e.recorded_at for e in ctx.store.read_all()]
    # (the clock the check is given: a day after the last event, or just before the first
    # one is older than the allowed age)
    age = AnchorAge(max_age=MAX_AGE, now=max(times) + timedelta(days=1))
    young = AnchorAge(max_age=MAX_AGE, now=min(times) + MAX_AGE)
    assert verify(ctx, checks=IntegrityChecks(key=KEY, age=age)).ok
    # when every checkpoint is deleted and a stream rewritten
    _delete_every_checkpoint(ctx)
    _rewrite(ctx, target)
    # then, with the key configured, events older than the allowed age that no checkpoint
    # covers are a finding of verify and of the saga's audit
    report = verify(ctx, checks=IntegrityChecks(key=KEY, age=age))
    assert report.tampered and report.anchors is not None
    assert _problems(report.anchors.findings) == {AnchorProblem.UNANCHORED_OLD_EVENTS}
    assert "no checkpoint exists" in report.anchors.findings[0].message
    audited = audit(ctx, target, tenant="default", checks=IntegrityChecks(key=KEY, age=age))
    assert audited.anchors is not None
    assert _problems(audited.anchors.findings) == {AnchorProblem.UNANCHORED_OLD_EVENTS}
    assert audited.anchors.findings[0].stream_id == saga_stream(target)
    # while events younger than that age are not yet evidence either way
    assert verify(ctx, checks=IntegrityChecks(key=KEY, age=young)).anchors.ok  # type: ignore[union-attr]
    # and without a key (no anchoring promised) nothing is claimed
    assert verify(ctx, checks=IntegrityChecks(age=age)).anchors.ok  # type: ignore[union-attr]


def _snapshotted(ctx: ProjectionContext) -> tuple[str, PostgresSagaLog, StoredSnapshot]:
    """A completed saga whose load kept a sealed snapshot (at its last event)."""
    log = PostgresSagaLog(ctx.store, DefinitionStore(ctx.store), snapshot_every=2)
    script = TripScript().completed()
    script.write(log)
    project_all(ctx)
    loaded = log.load(script.saga_id)
    assert loaded.state.status is SagaStatus.COMPLETED
    stream = saga_stream(script.saga_id)
    snapshot = PostgresSnapshots(ctx.store).read_snapshots([stream], SCHEMA)[stream]
    assert snapshot.version == loaded.version
    return script.saga_id, log, snapshot


def _failed_runs(doc: dict) -> dict:
    """A snapshot state document whose every run says it failed."""
    nodes = [{"run": {**node["run"], "status": str(RunStatus.FAILED)}} if "run" in node
             else node for node in doc["nodes"]]
    return {**doc, "nodes": nodes}


def test_an_edited_snapshot_is_refused_by_loads_and_named_by_verify_and_audit(
    ctx: ProjectionContext,
) -> None:
    saga_id, log, snapshot = _snapshotted(ctx)
    # when its state is edited in place to show every step failed (its seal left as it was)
    _sql(ctx, "UPDATE eventstore.snapshots SET state = %s WHERE stream_id = %s",
         (Jsonb(_failed_runs(snapshot.state)), snapshot.stream_id))
    # then verify names it, and the saga's audit says the same
    report = verify(ctx)
    assert [(d.saga_id, d.table, d.key) for d in report.differences] == [
        (saga_id, "eventstore.snapshots", f"{snapshot.stream_id}@{snapshot.version}")]
    assert "does not match its hash" in report.differences[0].problem
    audited = audit(ctx, saga_id, tenant="default")
    assert not audited.ok and audited.chain_ok
    assert audited.snapshot_problem is not None and "does not match its hash" in (
        audited.snapshot_problem)
    # and a load refuses it: the saga is COMPLETED with no failed step, as its log says
    loaded = log.load(saga_id)
    assert loaded.state == log.load_history(saga_id).state
    assert all(run.status is not RunStatus.FAILED for run in loaded.state.forward.values())
    # and keeps a sealed one of what it folded instead, which verify finds whole
    assert verify(ctx).ok


def test_a_snapshot_edited_with_its_seal_recomputed_is_still_named_by_verify_and_audit(
    ctx: ProjectionContext,
) -> None:
    saga_id, _log, snapshot = _snapshotted(ctx)
    # when its state is edited and its hash recomputed (the seal is no signature)
    forged = _failed_runs(snapshot.state)
    _sql(ctx, "UPDATE eventstore.snapshots SET state = %s, state_hash ="
              " encode(sha256(convert_to(%s::jsonb::text, 'UTF8')), 'hex') WHERE stream_id = %s",
         (Jsonb(forged), Jsonb(forged), snapshot.stream_id))
    # then verify re-folds the log up to the snapshot's version and names the difference
    report = verify(ctx)
    assert [(d.saga_id, d.table) for d in report.differences] == [
        (saga_id, "eventstore.snapshots")]
    assert "not the fold of the log" in report.differences[0].problem
    # and so does the saga's audit
    audited = audit(ctx, saga_id, tenant="default")
    assert not audited.ok
    assert audited.snapshot_problem is not None
    assert report.differences[0].problem.endswith(audited.snapshot_problem)


COLUMN_EDITS: dict[str, tuple[str, str]] = {
    # an attack, the SQL that makes it, the words verify's finding uses
    "tenant_id": ("UPDATE eventstore.events SET tenant_id = 'mallory' WHERE event_id = %s",
                  "tenant_id column does not match"),
    "recorded_at": ("UPDATE eventstore.events SET recorded_at = recorded_at - interval '1 day'"
                    " WHERE event_id = %s", "content, tenant or recording time"),
}


@pytest.mark.parametrize("column", list(COLUMN_EDITS))
def test_an_edited_tenant_or_recording_time_is_named_by_verify_and_audit(
    ctx: ProjectionContext, repo: PostgresSagaLog, column: str
) -> None:
    # given two projected sagas
    target, bystander = _sagas(repo, ctx)
    assert verify(ctx).ok
    events = ctx.store.read_stream(saga_stream(target))
    assert {e.hash_version for e in events} == {2}  # appended now: the hash covers both
    # when one event's column is edited (say, to show it to another tenant's trace reads)
    statement, words = COLUMN_EDITS[column]
    _sql(ctx, statement, (events[2].event_id,))
    # then verify names the stream at that event
    report = verify(ctx)
    assert report.broken_chains == 1
    (difference,) = [d for d in report.differences if d.table == "eventstore.events"]
    assert difference.saga_id == target and difference.key == f"{saga_stream(target)}@3"
    assert words in difference.problem
    # and the saga's audit says the same; the bystander's audit is clean
    audited = audit(ctx, target, tenant="default")
    assert not audited.ok and audited.chain_break_version == 3
    assert audited.chain_break is not None and words in audited.chain_break
    assert audit(ctx, bystander, tenant="default").ok


def test_a_layout_1_event_with_its_tenant_column_edited_is_named_too(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given a saga whose events were hashed before hash versions (layout 1: content only)
    target, _ = _sagas(repo, ctx)
    prev = GENESIS_HASH
    for event in ctx.store.read_stream(saga_stream(target)):
        digest = recorded_event_hash(replace(event, hash_version=1, prev_hash=prev))
        _sql(ctx, "UPDATE eventstore.events SET hash_version = 1, prev_hash = %s,"
                  " event_hash = %s WHERE event_id = %s", (prev, digest, event.event_id))
        prev = digest
    _sql(ctx, "UPDATE eventstore.streams SET last_hash = %s WHERE stream_id = %s",
         (prev, saga_stream(target)))
    assert verify(ctx).ok  # old chains keep verifying
    # when its tenant column (outside a layout-1 hash) is edited
    event = ctx.store.read_stream(saga_stream(target))[1]
    _sql(ctx, "UPDATE eventstore.events SET tenant_id = 'mallory' WHERE event_id = %s",
         (event.event_id,))
    # then the column no longer matches the tenant its hashed metadata names
    report = verify(ctx)
    assert report.broken_chains == 1
    assert "tenant_id column does not match" in report.differences[0].problem
    assert not audit(ctx, target, tenant="default").ok


TAMPERINGS: dict[str, Callable[[ProjectionContext, str], None]] = {
    "tenant_id": lambda ctx, saga_id: _sql(
        ctx, "UPDATE eventstore.events SET tenant_id = 'x' WHERE stream_id = %s"
             " AND stream_version = 2", (saga_stream(saga_id),)),
    "recorded_at": lambda ctx, saga_id: _sql(
        ctx, "UPDATE eventstore.events SET recorded_at = now() WHERE stream_id = %s"
             " AND stream_version = 2", (saga_stream(saga_id),)),
    "data": lambda ctx, saga_id: _sql(
        ctx, "UPDATE eventstore.events SET data = jsonb_set(data, '{at}',"
             " '\"2020-01-01T00:00:00+00:00\"') WHERE stream_id = %s AND stream_version = 2",
        (saga_stream(saga_id),)),
    "rewritten": _rewrite,
    "head": lambda ctx, saga_id: _sql(
        ctx, "UPDATE eventstore.streams SET version = version - 1 WHERE stream_id = %s",
        (saga_stream(saga_id),)),
    "truncated": lambda ctx, saga_id: _sql(
        ctx, "DELETE FROM eventstore.events WHERE stream_id = %s AND stream_version ="
             " (SELECT max(stream_version) FROM eventstore.events WHERE stream_id = %s)",
        (saga_stream(saga_id), saga_stream(saga_id))),
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_audit_and_verify_agree_on_every_tampered_fixture(
    ctx: ProjectionContext, repo: PostgresSagaLog, tmp_path: Path, tampering: str
) -> None:
    # given two anchored sagas and a high-water mark
    target, bystander = _sagas(repo, ctx)
    witness = AnchorWitness(tmp_path / "anchor.witness")
    _wait_final(ctx.store)
    assert take_checkpoint(ctx.store, KEY, witness) is not None
    checks = IntegrityChecks(key=KEY, witness=witness)
    # when one saga is tampered with
    TAMPERINGS[tampering](ctx, target)
    # then verify fails, and flags the target (in a chain, a snapshot or a checkpoint)
    report = verify(ctx, checks=checks)
    assert not report.ok
    flagged = {d.saga_id for d in report.differences
               if d.table in ("eventstore.events", "eventstore.snapshots")}
    flagged |= {f.stream_id.removeprefix("saga-") for f in report.anchors.findings  # type: ignore[union-attr]
                if f.stream_id}
    assert flagged == {target}
    # and audit agrees, saga by saga: the target fails, the bystander is intact
    audited = audit(ctx, target, tenant="default", checks=checks)
    assert not audited.ok
    assert audited.tampered == bool(report.anchors and report.anchors.findings)  # type: ignore[union-attr]
    assert audit(ctx, bystander, tenant="default", checks=checks).ok
