"""The commands' typed reports: the same records as JSON (keys unchanged) and as text."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from projections import Alert, ProjectionStatus, RebuildReport, TableSetStatus, VerifyReport
from projections.metrics import Metrics
from projections.rows import QueueRow
from projections.verify import Difference
from sagafleet.commands.rendering import (
    AlertsReport,
    ProjectionStatusReport,
    QueueReport,
    RebuildSummary,
    StatsReport,
    VerifyView,
)
from sagafleet.output import emit_report

ALERT = Alert(kind="captured_without_confirmation", severity="critical",
              message="payment captured, no itinerary", saga_id="s-1",
              since=datetime(2026, 1, 1, tzinfo=UTC))


def test_verify_renders_every_difference_and_keeps_ok_in_its_json() -> None:
    # given a verify report with one difference
    report = VerifyReport("sagas", 1, streams_checked=2, sagas_checked=2, broken_chains=0,
                          differences=[Difference("s-1", "saga_summary", "s-1", "differs",
                                                  column="state", expected="COMPLETED",
                                                  actual="COMPENSATED")])
    view = VerifyView(report)
    # then the JSON keeps the report's fields and ok, and the text names the difference
    assert view.to_json()["ok"] is False and view.to_json()["differences"][0]["column"] == "state"
    text = view.to_text()
    line = "s-1 saga_summary[s-1].state: differs (log 'COMPLETED', read model 'COMPENSATED')"
    assert line in text
    assert text.endswith("1 differences")


def test_stats_and_alerts_render_alerts_the_same_way() -> None:
    stats = StatsReport(Metrics(version=1, definitions=[], tools=[]), [ALERT])
    assert set(stats.to_json()) == {"metrics", "alerts"}
    line = "[critical] captured_without_confirmation: payment captured, no itinerary (s-1)"
    assert stats.to_text() == f"ALERT {line}"
    assert AlertsReport([ALERT]).to_text() == line
    assert AlertsReport([]).to_text() == "no alerts"
    assert StatsReport(Metrics(version=1, definitions=[], tools=[]), []).to_text() == (
        "no sagas yet")


def test_projection_status_json_carries_the_active_sets_lag() -> None:
    active = TableSetStatus("sagas", 1, "active", "projections.sagas.v1", "1:5", 0, 0.0)
    report = ProjectionStatusReport([ProjectionStatus("sagas", 1, [active])])
    (doc,) = report.to_json()
    assert doc["lag"] == doc["table_sets"][0] and doc["name"] == "sagas"
    assert report.to_text() == (
        "sagas: active v1\n  v1 active    checkpoint 1:5  behind 0 events / 0.0s")


def test_rebuild_and_empty_queue_text(capsys) -> None:
    summary = RebuildSummary([RebuildReport("sagas", 1, 2, 100, 2.0)])
    assert summary.to_json()[0]["events_per_s"] == 50.0
    assert summary.to_text() == "sagas: v1 -> v2, 100 events in 2.0s (50.0 events/s)"
    emit_report(QueueReport([]), as_json=False)
    assert capsys.readouterr().out == "the operator queue is empty\n"
    emit_report(QueueReport([]), as_json=True)
    assert json.loads(capsys.readouterr().out) == []


def test_the_queue_text_names_who_may_answer_an_approval_request() -> None:
    # given an approval request whose evidence carries the capture gate saga_core recorded
    gate = {"role": "approver", "four_eyes": True, "risk_class": "money", "amount": 250000}
    row = QueueRow(saga_id="s1", entry="approval", step_id="capture_payment", kind="forward",
                   tenant="t", definition_name="trip", reason="approval policy applies",
                   action_hash="h", scope="capture", evidence={"details": {"gate": gate}},
                   deadline=None, requested_at=datetime(2026, 1, 1, tzinfo=UTC))
    # then the queue says which person may answer it
    assert QueueReport([row]).to_text().endswith(
        "who may answer: a person with role approver, not the saga's starter, money risk")


def test_the_queue_text_shows_the_running_totals_of_a_cumulative_gate() -> None:
    # given a request asked because a capture would pass the saga total and the tenant window
    gate = {"role": "approver", "four_eyes": True, "risk_class": "money", "amount": 100000,
            "saga_total": {"limit": 300000, "counted_calls": 3, "before": 300000,
                           "with_this_call": 400000, "unjudged_calls": []},
            "tenant_window": {"window": "payments.capture:amount", "limit": 500000,
                              "period": "PT1H", "counted_calls": 5, "before": 500000,
                              "with_this_call": 600000}}
    row = QueueRow(saga_id="s1", entry="approval", step_id="capture_3", kind="forward",
                   tenant="t", definition_name="plan", reason="approval policy applies",
                   action_hash="h", scope="over_tenant_window",
                   evidence={"details": {"gate": gate}}, deadline=None,
                   requested_at=datetime(2026, 1, 1, tzinfo=UTC))
    # then the queue shows both totals under who may answer
    assert QueueReport([row]).to_text().splitlines()[-2:] == [
        "    saga total: 300000 in 3 earlier call(s), 400000 with this call (limit 300000)",
        "    tenant window payments.capture:amount over PT1H: 500000 in 5 call(s), 600000 "
        "with this call (limit 500000)"]


def test_the_queue_text_states_the_definitions_business_invariant() -> None:
    # given an escalation whose evidence carries the definition's invariant
    invariant = "Money leaves the source account only if it arrives in the destination."
    row = QueueRow(saga_id="s1", entry="escalation", step_id="credit", kind="forward",
                   tenant="t", definition_name="payout", reason="postcondition not observed",
                   action_hash=None, scope=None, evidence={"details": {"invariant": invariant}},
                   deadline=None, requested_at=datetime(2026, 1, 1, tzinfo=UTC))
    # then the queue shows it with the entry
    assert QueueReport([row]).to_text().endswith(f"invariant: {invariant}")


def test_the_queue_text_offers_the_pivots_correction_with_its_residual_impact() -> None:
    # given an escalation past the pivot whose evidence offers the pivot's correction
    offer = {"action": "run_correction", "step": "send_itinerary",
             "tool": "email.send_correction@1", "does": "repairs send_itinerary",
             "does_not_undo": ["send_itinerary's own effect", "the effects of hold_flight"]}
    row = QueueRow(saga_id="s1", entry="escalation", step_id="ship", kind="forward",
                   tenant="t", definition_name="trip", reason="permanent failure",
                   action_hash=None, scope=None, evidence={"details": {"correction": offer}},
                   deadline=None, requested_at=datetime(2026, 1, 1, tzinfo=UTC))
    # then the queue names the action, what it does and what it does not undo
    text = QueueReport([row]).to_text().splitlines()
    assert text[-2] == ("    correction (resolve run_correction): email.send_correction@1 on "
                        "send_itinerary: repairs send_itinerary")
    assert text[-1] == ("    it does not undo: send_itinerary's own effect; "
                        "the effects of hold_flight")


def test_the_audit_text_states_the_definitions_business_invariant() -> None:
    from projections.audit import AuditReport
    from sagafleet.commands.rendering import AuditView
    report = AuditReport(saga_id="s1", at=None, events_total=0, invariant="No charge without "
                         "a booking.", chain_ok=True, chain_break=None, timeline=[], state=None)
    assert AuditView(report).to_text().splitlines()[1] == "invariant: No charge without a booking."
    assert AuditView(report).to_json()["invariant"] == "No charge without a booking."
    silent = AuditReport(saga_id="s1", at=None, events_total=0, invariant="", chain_ok=True,
                         chain_break=None, timeline=[], state=None)
    assert "invariant" not in AuditView(silent).to_text()
