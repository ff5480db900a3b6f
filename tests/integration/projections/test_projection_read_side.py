"""What people look at: the Prometheus endpoint, audit at a position, the operator queue."""

from __future__ import annotations

import json

import pytest
from principal_support import issue_token
from projection_support import SECRET_CARD, TripScript

from events.saga_log.postgres import PostgresSagaLog
from projections import (
    ProjectionContext,
    ProjectionRunner,
    audit,
    business_alerts,
    collect_metrics,
    operator_queue,
)
from sagafleet.cli import main
from sagafleet.exit_codes import ExitCode

pytestmark = pytest.mark.integration


def test_audit_shows_the_timeline_and_the_state_as_of_a_position(
    ctx: ProjectionContext, repo: PostgresSagaLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a compensated saga
    saga = TripScript().compensated()
    saga.write(repo)
    records = ctx.store.read_stream(f"saga-{saga.saga_id}")
    before_failure = next(r for r in records if r.type == "StepFailed").position.global_position - 1

    # when it is audited as of the event before the payment failed
    report = audit(ctx, saga.saga_id, before_failure, tenant="default")

    # then the timeline stops there, the state is what it was then, the chain checks out
    assert report.chain_ok and report.events_total == len(records)
    assert [e.type for e in report.timeline][-1] == "StepStarted"
    assert report.state is not None and report.state.summary.state == "RUNNING"
    assert report.timeline[0].actor == "agent-7"
    assert audit(ctx, saga.saga_id, tenant="default").state.summary.state == "COMPENSATED"  # type: ignore[union-attr]
    # and the secret input is masked everywhere, in the command's JSON too
    assert report.timeline[0].data["input"]["card_token"] == "***"
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", ctx.store.conninfo)
    monkeypatch.setenv("SAGAFLEET_TOKEN", issue_token(ctx.store.conninfo, "eve", ["auditor"]))
    assert main(["audit", saga.saga_id, "--json"]) == ExitCode.OK
    assert SECRET_CARD not in repr(audit(ctx, saga.saga_id, tenant="default"))


def test_stats_and_alerts_see_captures_without_reservation(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given a saga stuck after the payment was captured (long ago, by the saga clock)
    stuck = TripScript().start().succeed("hold_flight").succeed("hold_hotel")
    stuck.succeed("capture_payment").write(repo)
    TripScript().compensated().write(repo)
    ProjectionRunner(ctx).catch_up()

    # when metrics and alerts are read
    metrics = collect_metrics(ctx, tenant="default")
    alerts = business_alerts(ctx, tenant="default")

    # then the rates count finished sagas and the alert names the captured payment
    (trip,) = metrics.definitions
    assert (trip.sagas, trip.finished, trip.compensation_rate) == (2, 1, 1.0)
    assert any(
        a.kind == "captured_without_confirmation" and a.saga_id == stuck.saga_id for a in alerts
    )


def test_the_operator_queue_shows_evidence_and_resolve_records_one_event(
    ctx: ProjectionContext,
    repo: PostgresSagaLog,
    broker_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given a saga escalated to a human with evidence
    saga = TripScript().start().succeed("hold_flight").succeed("hold_hotel").succeed(
        "capture_payment"
    ).fail("send_itinerary").escalate("capture_payment")
    saga.write(repo)
    runner = ProjectionRunner(ctx)
    runner.catch_up()

    # when the operator looks at the queue
    (entry,) = operator_queue(ctx, tenant="default")

    # then it shows the structured evidence (secrets masked)
    assert entry.saga_id == saga.saga_id and entry.entry == "manual_intervention"
    assert entry.evidence["residual_risk"] == "customer charged without a trip"
    assert entry.evidence["alternatives"] == ["retry_step", "mark_compensated"]
    assert entry.evidence["details"]["args"]["card_token"] == "***"
    assert entry.deadline is not None

    # when the operator resolves it twice through the command line
    monkeypatch.setenv("SAGAFLEET_DATABASE_URL", ctx.store.conninfo)
    monkeypatch.setenv("SAGAFLEET_BROKER_URL", broker_url)
    monkeypatch.setenv("SAGAFLEET_TOKEN", issue_token(ctx.store.conninfo, "ada", ["operator"]))
    args = ["resolve", saga.saga_id, "mark_compensated", "--step", "capture_payment",
            "--reason", "refunded by phone", "--json"]
    capsys.readouterr()
    assert main(args) == ExitCode.OK
    first = json.loads(capsys.readouterr().out)
    count = len(ctx.store.read_stream(f"saga-{saga.saga_id}"))
    assert main(args) == ExitCode.OK
    second = json.loads(capsys.readouterr().out)

    # then exactly one OperatorAction was recorded, with actor and reason
    records = ctx.store.read_stream(f"saga-{saga.saga_id}")
    actions = [r for r in records if r.type == "OperatorAction"]
    assert (first["recorded"], second["recorded"]) == (True, False)
    assert len(actions) == 1 and len(records) == count
    assert actions[0].data["actor"] == "ada" and actions[0].data["reason"] == "refunded by phone"
    # and once projected, the queue entry is gone
    runner.catch_up()
    assert all(e.saga_id != saga.saga_id or e.entry != "manual_intervention"
               for e in operator_queue(ctx, tenant="default"))
