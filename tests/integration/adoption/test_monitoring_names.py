"""Every metric the Grafana dashboard and the alert rules of examples/monitoring query is one
a real scrape serves: the projector's endpoint over a migrated database, and a worker's
endpoint, both fetched over HTTP and read with prometheus_client's own parser. A renamed
metric fails here instead of leaving an empty panel or an alert that can never fire."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from principal_support import issue_token
from prometheus_client import make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

from application.principals.postgres import PostgresPrincipals
from application.telemetry.metrics import WorkerMetrics
from events import EventStore
from projections import ProjectionContext, exporter_app
from projections.prometheus import ALERT_KINDS
from sagafleet.metrics_http import FleetOnly, MetricsHttpServer

MONITORING = Path(__file__).resolve().parents[3] / "examples" / "monitoring"
# A metric name in PromQL: sagafleet_… (and `up`, which Prometheus itself adds per target).
METRIC = re.compile(r"\bsagafleet_[a-z0-9_]+\b")
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",),
            "summary": ("_count", "_sum")}


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return queries


def _rule_queries() -> list[str]:
    rules = yaml.safe_load((MONITORING / "sagafleet-alerts.yaml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def _get(url: str, token: str) -> str:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our own server
        return response.read().decode()


@pytest.fixture
def scraped(database: str) -> Iterator[dict[str, str]]:
    """Every series name a real scrape of the projector and of a worker offers, with the
    family type it belongs to."""
    token = issue_token(database, "prometheus", ("fleet_operator",), tenant="fleet")
    with ProjectionContext.connect(database) as ctx, EventStore.connect(database) as store:
        directory = PostgresPrincipals(store)
        projector = MetricsHttpServer(FleetOnly(exporter_app(ctx), directory),
                                      host="127.0.0.1", port=0).start()
        worker = MetricsHttpServer(FleetOnly(make_wsgi_app(WorkerMetrics().registry),
                                             directory), host="127.0.0.1", port=0).start()
        try:
            texts = [_get(f"http://127.0.0.1:{projector.port}/metrics", token),
                     _get(f"http://127.0.0.1:{worker.port}/metrics", token)]
        finally:
            projector.close()
            worker.close()
    names: dict[str, str] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            names[family.name] = family.type
            for suffix in SUFFIXES.get(family.type, ()):
                names[family.name + suffix] = family.type
            for sample in family.samples:
                names[sample.name] = family.type
    yield names


def test_every_metric_the_dashboard_and_the_rules_query_is_served(scraped) -> None:
    # given the queries of the dashboard's panels and variables, and of every alert rule
    queries = _dashboard_queries() + _rule_queries()
    referenced = {name for query in queries for name in METRIC.findall(query)}
    assert len(referenced) > 20  # the files were read, not skipped

    # then each name is one the endpoints serve (a histogram's _bucket, a counter's _total)
    missing = sorted(referenced - set(scraped))
    assert not missing, f"not in any scrape: {missing}"
    # and the rates are taken of counters and histograms, never of gauges
    for query in queries:
        for name in re.findall(r"(?:rate|increase)\((sagafleet_[a-z0-9_]+)", query):
            assert scraped[name] in ("counter", "histogram"), (name, query)


def test_the_business_rules_name_exactly_the_kinds_the_projector_reports(scraped) -> None:
    rules = yaml.safe_load((MONITORING / "sagafleet-alerts.yaml").read_text())
    business = next(g for g in rules["groups"] if g["name"] == "sagafleet-business")
    kinds = {re.search(r'kind="(\w+)"', rule["expr"]).group(1) for rule in business["rules"]}
    assert kinds == set(ALERT_KINDS)
    assert len(kinds) == 4
