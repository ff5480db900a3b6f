"""The projector's Prometheus endpoint, scraped over HTTP and read with prometheus_client's
own parser: names, types and values after a known set of sagas, over a window."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from principal_support import token_for
from projection_support import TripScript
from prometheus_client.parser import text_string_to_metric_families
from read_model_support import project_all

from application.principals.postgres import PostgresPrincipals
from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext, exporter_app
from sagafleet.metrics_http import FleetOnly, MetricsHttpServer

pytestmark = pytest.mark.integration


def _scrape(ctx: ProjectionContext, window_s: float) -> tuple[str, str]:
    """One scrape over HTTP, as Prometheus makes it with a fleet operator's token."""
    directory = PostgresPrincipals(ctx.store)
    token = token_for(_Holder(directory), "prometheus", ("fleet_operator",), tenant="fleet")
    server = MetricsHttpServer(FleetOnly(exporter_app(ctx, window_s), directory),
                               host="127.0.0.1", port=0).start()
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.read().decode(), response.headers["Content-Type"]
    finally:
        server.close()


class _Holder:
    """A directory seen as a fleet (what token_for asks for)."""

    def __init__(self, principals: PostgresPrincipals) -> None:
        self.principals = principals


def _families(text: str) -> dict[str, tuple[str, dict[tuple[tuple[str, str], ...], float]]]:
    """family name -> (type, {sorted labels of a sample named like the family (or _total):
    value})."""
    out = {}
    for family in text_string_to_metric_families(text):
        samples = {tuple(sorted(s.labels.items())): s.value for s in family.samples
                   if s.name in (family.name, f"{family.name}_total")}
        out[family.name] = (family.type, samples)
    return out


def _at(minutes_ago: float) -> TripScript:
    script = TripScript()
    script.t = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return script


def test_the_endpoint_reports_the_window_by_prometheus_conventions(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given, two hours ago, a completed saga
    _at(120).completed().write(repo)
    # and in the last few minutes two completed, one compensated, and one still running
    # whose flight hold recorded two different receipts (a duplicate effect)
    for script in (_at(5).completed(), _at(4).completed(), _at(3).compensated()):
        script.write(repo)
    running = _at(2).start().succeed("hold_flight").duplicate_success("hold_flight", "again")
    running.write(repo)
    project_all(ctx)

    # when Prometheus scrapes the endpoint with a 15-minute window
    text, content_type = _scrape(ctx, 900)
    families = _families(text)

    # then it is the text format, with HELP and TYPE lines for every family
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "# HELP sagafleet_sagas_started " in text
    assert "# TYPE sagafleet_duplicate_effects_total counter" in text
    trip = (("definition", "trip"), ("tenant", "default"))  # each series is one tenant's

    def value(name: str, labels: tuple[tuple[str, str], ...] = trip) -> float:
        return families[name][1][tuple(sorted(labels))]

    # and the window holds the four recent sagas, not the old one
    assert families["sagafleet_metrics_window_seconds"] == ("gauge", {(): 900.0})
    assert families["sagafleet_sagas_started"][0] == "gauge"
    assert value("sagafleet_sagas_started") == 4
    assert value("sagafleet_sagas_finished", (*trip, ("state", "COMPLETED"))) == 2
    assert value("sagafleet_sagas_finished", (*trip, ("state", "COMPENSATED"))) == 1
    assert value("sagafleet_saga_completion_ratio") == pytest.approx(2 / 3)
    assert value("sagafleet_saga_compensation_ratio") == pytest.approx(1 / 3)
    assert value("sagafleet_saga_manual_intervention_ratio") == 0
    assert value("sagafleet_sagas_unfinished") == 1
    assert value("sagafleet_sagas_waiting_for_operator") == 0
    # and time to terminal: 9 s for each completed trip, 12 s for the compensated one
    assert value("sagafleet_saga_time_to_terminal_seconds", (*trip, ("quantile", "0.5"))) == 9
    assert value("sagafleet_saga_time_to_terminal_seconds", (*trip, ("quantile", "0.95"))) == (
        pytest.approx(11.7))
    # and operations (a step's forward or compensation run): 4 per completed trip, 5 for the
    # compensated one (3 forward, one of them failed, 2 compensations), 1 for the running one
    assert families["sagafleet_operations_started"][0] == "gauge"
    assert value("sagafleet_operations_started") == 4 + 4 + 5 + 1
    assert value("sagafleet_operations_failed") == 1
    assert value("sagafleet_retry_amplification_ratio") == 1.0
    assert value("sagafleet_ambiguous_outcome_ratio") == 0.0
    # and the duplicate effect is a counter, per definition and per tool
    assert families["sagafleet_duplicate_effects"][0] == "counter"
    assert value("sagafleet_duplicate_effects") == 1
    hold = (("kind", "forward"), ("tool", "flights.hold"))
    assert value("sagafleet_tool_duplicate_effects", hold) == 1
    assert value("sagafleet_tool_operations_started", hold) == 4
    # and each hold took 1 s from start to receipt
    assert value("sagafleet_tool_latency_seconds", (*hold, ("quantile", "0.95"))) == 1.0
    # and the projection is caught up, and no business alert is open
    lag = (("projection", "sagas"), ("status", "active"), ("version", "1"))
    assert value("sagafleet_projection_lag_events", lag) == 0
    assert value("sagafleet_business_alerts", (("kind", "compensation_failing"),)) == 0
    # and the serving process's own metrics come along
    assert families["process_resident_memory_bytes"][0] == "gauge"
    # and no label names a saga
    assert all(label not in ("saga_id", "step_id") for family in families.values()
               for labels in family[1] for label, _ in labels)

    # when the window is three hours instead
    wide = _families(_scrape(ctx, 3 * 3600)[0])
    # then the old saga counts too
    assert wide["sagafleet_sagas_started"][1][trip] == 5
    assert wide["sagafleet_sagas_finished"][1][tuple(sorted((*trip, ("state", "COMPLETED"))))] == 3


def test_an_empty_window_reports_counts_but_no_shares(
    ctx: ProjectionContext, repo: PostgresSagaLog
) -> None:
    # given only a saga finished two hours ago
    _at(120).completed().write(repo)
    project_all(ctx)
    # when scraped with a 15-minute window
    families = _families(_scrape(ctx, 900)[0])
    # then no saga is in the window, and no share is invented from nothing
    assert families["sagafleet_sagas_started"] == ("gauge", {})
    assert families["sagafleet_saga_completion_ratio"][1] == {}
    assert families["sagafleet_saga_time_to_terminal_seconds"][1] == {}
