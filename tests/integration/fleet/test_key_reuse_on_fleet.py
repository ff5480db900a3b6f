"""A reused operation key with another payload, on real PostgreSQL, Redis and a worker process.

The tool (``orders.place`` of ``toolsets/order_tools.py``) does not dedupe by key: had the
engine called it again under the same key with another price, nothing downstream would
have noticed. It is called once; the worker refuses the second attempt in its claim's
commit, the saga waits in MANUAL_INTERVENTION with the reason, and the operator's
``retry_as_new_operation`` then places the order under a new key.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psycopg
import pytest
from fleet_harness import LEASE_S, QUEUE_WAIT_S, worker_env
from principal_support import authenticated, person

from application.messages import StepCommand
from saga_core import OperatorActionRejected
from saga_core.contracts import Receipt, SagaStatus, StepKind
from saga_core.engine.events import ManualInterventionRequired, StepStarted, StepSucceeded
from saga_core.engine.state import RunStatus
from sagafleet.processes import spawn_sagafleet, stop_processes
from workers.fleet import Fleet, FleetConfig

TOOLSETS = Path(__file__).parent / "toolsets"
sys.path.insert(0, str(TOOLSETS))

import order_tools  # noqa: E402  (found through TOOLSETS, as the worker finds it)

F = StepKind.FORWARD


def test_a_worker_refuses_a_reused_key_and_the_operator_retries_as_a_new_operation(
    database, broker, tmp_path, wait_settled, monkeypatch
):
    # given the order tools (the test process runs them too, on the same database)
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(order_tools.TABLE)
    fleet = Fleet(FleetConfig(database_url=database, broker_url=broker, lease_s=LEASE_S,
                              queue_wait_s=QUEUE_WAIT_S, worker_id="test-process"),
                  order_tools.tool_set())
    worker = None
    try:
        client = fleet.client()
        fleet.client_for(authenticated(fleet, "admin", ["admin"])).register_definition(
            order_tools.DEFINITION)
        saga_id = client.start("order", {"item": "lamp"}, key="o-1").saga_id
        # and an order whose first attempt was called once and answered 503 (run here,
        # before any worker process exists, so nothing can claim the retry meanwhile)
        fleet.executor.handle(StepCommand(saga_id=saga_id, step_id="quote", kind=F, attempt=1))
        fleet.executor.handle(StepCommand(saga_id=saga_id, step_id="place", kind=F, attempt=1))
        loaded = fleet.repo.load(saga_id)
        first = loaded.state.run("place", F)
        assert (first.status, first.attempt) == (RunStatus.SCHEDULED, 2)
        assert order_tools.calls(database) == [(first.operation_key, "lamp", 100)]
        # and a quote receipt recorded anew by a writer that did not decide (another version)
        requote = StepSucceeded(at=fleet.clock(), step_id="quote", kind=F, attempt=1,
                                operation_key=loaded.state.run("quote", F).operation_key,
                                receipt=Receipt(resource_id="quote-lamp", fields={"price": 120}))
        fleet.repo.append(saga_id, loaded.tenant, [requote], loaded.version)

        # when a real worker process is started and the due retry reaches it
        env = {**worker_env(database, broker), "SAGAFLEET_TOOLS": "order_tools:tool_set",
               "PYTHONPATH": os.pathsep.join([str(TOOLSETS), os.environ.get("PYTHONPATH", "")])}
        worker = spawn_sagafleet(["worker"], env, tmp_path / "worker.log")
        assert wait_settled(saga_id) is SagaStatus.MANUAL_INTERVENTION

        # then the tool was called once: the worker refused the claim and escalated instead
        assert order_tools.calls(database) == [(first.operation_key, "lamp", 100)]
        events = list(fleet.repo.load_history(saga_id).events)
        claims = [e for e in events if isinstance(e, StepStarted) and e.step_id == "place"]
        assert [c.attempt for c in claims] == [1]
        (manual,) = [e for e in events if isinstance(e, ManualInterventionRequired)]
        assert (manual.step_id, manual.kind) == ("place", F)
        for part in (first.operation_key, "'place'", claims[0].request_hash,
                     "${steps.quote.receipt.price}"):
            assert part in manual.reason
        assert "retry_as_new_operation" in manual.evidence.alternatives
        assert "retry_step" not in manual.evidence.alternatives
        # and the operator queue shows why, with the recorded and the new request hash
        view = client.status(saga_id)
        assert view.status == "MANUAL_INTERVENTION" and view.escalation is not None
        assert first.operation_key in view.escalation["reason"]

        # when the operator tries the same key, then that is refused
        operator = person(fleet, "ops", ["operator"])
        with pytest.raises(OperatorActionRejected, match="retry_as_new_operation"):
            operator.resolve(saga_id, "retry_step", step_id="place", reason="try again")
        # when, having checked that the 503 placed nothing, they retry as a new operation
        operator.resolve(saga_id, "retry_as_new_operation", step_id="place",
                         reason="checked: the first call placed no order")
        # then the worker places the order once, under a new key, at the price it now resolves
        assert wait_settled(saga_id) is SagaStatus.COMMITTED_WITH_REPAIR
        renewed = fleet.repo.load(saga_id).state.run("place", F)
        assert renewed.operation_key != first.operation_key
        assert order_tools.calls(database) == [
            (first.operation_key, "lamp", 100), (renewed.operation_key, "lamp", 120)]
    finally:
        if worker is not None:
            stop_processes([worker])
        fleet.close()
