"""A worker that meets an edited snapshot refuses it and goes on from the log: real worker
processes on real PostgreSQL and Redis."""

from __future__ import annotations

from principal_support import person
from psycopg.types.json import Jsonb
from trip_inputs import TRIP_INPUT

from events.integrity.snapshot_audit import snapshot_finding
from events.saga_log.snapshots import PostgresSnapshots
from events.saga_log.streams import saga_stream
from saga_core.contracts import SagaStatus
from saga_core.engine.state_codec import SCHEMA
from sagafleet.sandbox import ledger_for_saga


def test_a_worker_refuses_an_edited_snapshot_and_completes_the_saga_from_its_log(
    fleet, workers, wait_settled
):
    # given a worker that keeps a snapshot whenever a load folds more than two events, and a
    # trip whose capture waits for a person (its holds done, a snapshot kept)
    workers.start(1, extra_env={"SAGAFLEET_SNAPSHOT_EVERY": "2"})
    client = fleet.client()
    saga = client.start("trip", {**TRIP_INPUT, "amount": 250_000}, key="edited-snapshot")
    wait_settled(saga.saga_id, until=lambda _: bool(client.status(saga.saga_id).pending_approvals))
    stream = saga_stream(saga.saga_id)
    snapshots = PostgresSnapshots(fleet.store)
    kept = snapshots.read_snapshots([stream], SCHEMA)[stream]
    # when someone with table access edits it to say the saga already ended compensated
    # (its seal left as it was): a load that trusted it would act on nothing more
    state = {**kept.state, "state": {**kept.state["state"], "finished": "COMPENSATED"}}
    with fleet.store.connection() as conn:
        conn.execute("UPDATE eventstore.snapshots SET state = %s WHERE stream_id = %s",
                     (Jsonb(state), stream))
    # and the capture is approved
    person(fleet, "alice").approve(saga.saga_id, "capture_payment")
    # then the worker folds the log instead, and the trip completes with one charge
    assert wait_settled(saga.saga_id) is SagaStatus.COMPLETED
    ledger = ledger_for_saga(fleet.sandbox_pool, saga.saga_id)
    assert ledger.captures == 1 and ledger.is_complete_trip and not ledger.duplicates
    # and the snapshot kept now is the log's fold (the edited one was replaced)
    now = snapshots.read_snapshots([stream], SCHEMA)[stream]
    records = fleet.store.read_stream(stream)
    assert snapshot_finding(fleet.repo.codec, now, records) is None
