"""The runner on a real PostgreSQL: catch-up, restart mid-batch, late commits, copies."""

from __future__ import annotations

import psycopg
import pytest
from projection_support import TripScript

from events import Batch, SubscriptionBusy, UnitOfWork
from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext, ProjectionRunner, verify
from projections.store import read_rows
from saga_core.contracts import SagaStatus

pytestmark = pytest.mark.integration


def stored(ctx: ProjectionContext):  # type: ignore[no-untyped-def]
    with ctx.connection() as conn:
        return read_rows(conn, 1)


def test_catch_up_from_zero_builds_every_read_model(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given a log with a completed, a compensated and an escalated saga, written in pieces
    done = TripScript().completed()
    undone = TripScript().compensated()
    paused = TripScript().start().succeed("hold_flight").succeed("hold_hotel").escalate()
    for script in (done, undone, paused):
        script.write(repo, chunk=3)

    # when a runner with a small page catches up from the beginning
    applied = ProjectionRunner(ctx, batch_size=5).catch_up()

    # then every event was applied once and each summary shows the saga's state
    assert applied == len(done.events) + len(undone.events) + len(paused.events)
    rows = stored(ctx)
    assert rows[done.saga_id].summary.state == SagaStatus.COMPLETED
    assert rows[undone.saga_id].summary.state == SagaStatus.COMPENSATED
    assert rows[paused.saga_id].summary.state == SagaStatus.MANUAL_INTERVENTION
    assert rows[undone.saga_id].summary.last_error_class == "BusinessRejection"
    # and the secret card token never reaches a read model
    assert "tok_SECRET_4242" not in repr(rows)
    assert verify(ctx).ok


def test_a_restart_mid_batch_does_not_double_count(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given sagas with a duplicate success (a counter that must be exact)
    dup = TripScript().start().succeed("hold_flight").duplicate_success("hold_flight", "other")
    dup.write(repo)
    TripScript().completed().write(repo)

    # when the first runner crashes inside its batch after writing rows
    def crash(batch: Batch) -> None:
        raise RuntimeError("killed mid-batch")

    crashing = ProjectionRunner(ctx, batch_size=1000, on_batch=crash)
    with pytest.raises(RuntimeError):
        crashing.run_once()
    crashing.close()
    # then nothing of that batch is visible
    assert stored(ctx) == {}

    # when a fresh runner applies part, restarts, and applies the rest
    first = ProjectionRunner(ctx, batch_size=4)
    first.run_once()
    first.close()
    ProjectionRunner(ctx, batch_size=4).catch_up()

    # then every counter equals a single fold of the log
    step = {s.step_id: s for s in stored(ctx)[dup.saga_id].steps}["hold_flight"]
    assert (step.starts, step.successes, step.distinct_receipts) == (1, 2, 2)
    assert verify(ctx).ok


def test_a_late_committing_event_is_not_skipped(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given a saga whose next event is appended in a transaction that stays open
    slow = TripScript().start()
    slow.write(repo)
    slow.succeed("hold_flight")
    with psycopg.connect(ctx.store.conninfo) as held:
        slow.write(repo, unit=UnitOfWork(ctx.store, held))
        # and other writers commit after it
        fast = TripScript().completed()
        fast.write(repo, chunk=2)

        # when the projector catches up while the transaction is open
        runner = ProjectionRunner(ctx, batch_size=3)
        runner.catch_up()

        # then it has not moved past the open transaction (later commits wait too)
        rows = stored(ctx)
        assert rows[slow.saga_id].summary.stream_version == 1
        assert fast.saga_id not in rows
        held.commit()

    # when it runs again after the late commit
    runner.catch_up()

    # then the late event and everything after it are applied
    rows = stored(ctx)
    assert rows[slow.saga_id].summary.stream_version == len(slow.events)
    assert rows[fast.saga_id].summary.state == SagaStatus.COMPLETED
    assert verify(ctx).ok


def test_only_one_copy_processes_a_projection_at_a_time(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given one runner that holds the projection
    TripScript().completed().write(repo)
    first = ProjectionRunner(ctx)
    first.run_once()

    # when a second copy tries, then it is refused until the first lets go
    second = ProjectionRunner(ctx)
    with pytest.raises(SubscriptionBusy):
        second.run_once()
    first.close()
    second.run_once()
    second.close()
