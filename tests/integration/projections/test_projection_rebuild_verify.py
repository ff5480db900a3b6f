"""Rebuild while writing, and verify catching hand-edited rows and events."""

from __future__ import annotations

import threading

import pytest
from projection_support import SECRET_CARD, TripScript

from events import CheckpointConflict, Position
from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext, ProjectionRunner, rebuild, verify
from projections.store import read_rows
from sagafleet.cli import main
from sagafleet.exit_codes import ExitCode

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("workers", [1, 3])
def test_rebuild_while_writing_switches_to_a_complete_new_table_set(
    ctx: ProjectionContext, repo: PostgresSagaLog, workers: int
) -> None:
    # workers=3: three processes fold the log up to the horizon in parallel while sagas
    # are still being written; the runner resumes from the horizon and must skip what they
    # folded beyond it and apply the rest.
    # given a live projector's table set holding some sagas
    for _ in range(5):
        TripScript().completed().write(repo)
    # and two sagas in the operator queue (evidence as JSON, a secret to mask)
    waiting = TripScript().start().succeed("hold_flight").succeed("hold_hotel").ask_approval()
    stuck = TripScript().start().succeed("hold_flight").succeed("hold_hotel").escalate()
    for script in (waiting, stuck):
        script.write(repo)
    live = ProjectionRunner(ctx, batch_size=50)
    live.catch_up()

    # when sagas keep being written while a rebuild runs
    stop = threading.Event()
    written: list[str] = []

    def writer() -> None:
        while not stop.is_set() and len(written) < 200:
            script = TripScript().compensated()
            script.write(repo, chunk=4)
            written.append(script.saga_id)

    thread = threading.Thread(target=writer)
    thread.start()
    progress = []
    try:
        report = rebuild(ctx, batch_size=20, progress=progress.append, progress_every_s=0,
                         workers=workers)
    finally:
        stop.set()
        thread.join()

    # then the new set became active in the rebuild's last transaction and v1 is gone
    assert (report.old_version, report.new_version) == (1, 2)
    assert progress and progress[-1].version == 2
    with ctx.connection() as conn:
        assert conn.execute("SELECT to_regclass('projections.saga_summary_v1')").fetchone() == (
            None,
        )
    # and the live runner follows the switch and catches up on the new set
    live.catch_up()
    live.catch_up()
    with ctx.connection() as conn:
        rows = read_rows(conn, 2)
    assert set(written) <= set(rows)
    assert len(rows) == 7 + len(written)
    with ctx.connection() as conn:
        queue = conn.execute(
            "SELECT saga_id, entry, evidence::text FROM projections.operator_queue_v2"
        ).fetchall()
    assert {(saga, entry) for saga, entry, _ in queue} == {
        (waiting.saga_id, "approval"), (stuck.saga_id, "manual_intervention")}
    assert all(SECRET_CARD not in evidence for _, _, evidence in queue)
    assert verify(ctx).ok


def test_verify_catches_a_hand_edited_row_and_a_hand_edited_event(
    ctx: ProjectionContext, repo: PostgresSagaLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a projected log that verifies
    edited_row = TripScript().completed()
    edited_event = TripScript().compensated()
    for script in (edited_row, edited_event):
        script.write(repo)
    ProjectionRunner(ctx).catch_up()
    assert verify(ctx).ok

    # when someone edits a read-model row and an event by hand
    with ctx.connection() as conn:
        conn.execute(
            "UPDATE projections.saga_summary_v1 SET state = 'COMPENSATED' WHERE saga_id = %s",
            (edited_row.saga_id,),
        )
        conn.execute(
            "UPDATE eventstore.events SET data = jsonb_set(data, '{message}', '\"fine\"')"
            " WHERE stream_id = %s AND event_type = 'StepFailed'",
            (f"saga-{edited_event.saga_id}",),
        )

    # then verify reports each difference by saga
    report = verify(ctx)
    assert not report.ok
    by_saga = {(d.saga_id, d.table, d.column) for d in report.differences}
    assert (edited_row.saga_id, "saga_summary", "state") in by_saga
    assert report.broken_chains == 1
    assert any(
        d.saga_id == edited_event.saga_id and "hash chain" in d.problem
        for d in report.differences
    )
    # and the command exits with VERIFY_FAILED
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", ctx.store.conninfo)
    assert main(["verify", "--json"]) == ExitCode.VERIFY_FAILED


def test_a_subscription_starts_after_a_position_only_once(ctx: ProjectionContext) -> None:
    # the bulk phase hands the runner its horizon this way; it never moves a checkpoint
    subscription = ctx.store.subscription("test.start_at")
    subscription.start_at(Position(5, 7))
    assert subscription.checkpoint() == Position(5, 7)
    with pytest.raises(CheckpointConflict, match="already has a checkpoint"):
        subscription.start_at(Position(9, 9))
    subscription.close()
