"""The metrics endpoints are the platform's: every tenant's figures, kept apart by a ``tenant``
label, served over HTTP only to a principal with the fleet_operator role proven by its bearer
token — a tenant's operator, an unknown, revoked or malformed token, or none, reads nothing.
While the directory cannot be reached, only a token admitted before is still served (real
PostgreSQL servers, the endpoint served over HTTP as ``sagafleet projector`` serves it)."""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fleet_harness import install_everything
from principal_support import issue_token, token_for
from projection_support import TripScript
from prometheus_client import make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families
from read_model_support import project_all

from application.principals.postgres import PostgresPrincipals
from application.telemetry.metrics import WorkerMetrics
from events import EventStore
from events.saga_log.postgres import PostgresSagaLog
from projections import ProjectionContext, exporter_app
from saga_core.errors import ErrorKind
from sagafleet import embedded
from sagafleet.metrics_http import FleetOnly, MetricsHttpServer
from workers.dead_letters.store import DeadLetters, dead_letter_body

pytestmark = pytest.mark.integration


class _Holder:
    """A directory seen as a fleet (what token_for asks for)."""

    def __init__(self, principals: PostgresPrincipals) -> None:
        self.principals = principals


def _get(port: int, authorization: str | None) -> tuple[int, dict[str, str], str]:
    headers = {} if authorization is None else {"Authorization": authorization}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, dict(refused.headers), refused.read().decode()


@pytest.fixture
def endpoint(ctx: ProjectionContext) -> Iterator[int]:
    """The projector's endpoint over the test database, guarded as the command serves it."""
    server = MetricsHttpServer(FleetOnly(exporter_app(ctx, 3600), PostgresPrincipals(ctx.store)),
                               host="127.0.0.1", port=0).start()
    try:
        yield server.port
    finally:
        server.close()


def test_nobody_but_the_fleet_role_reads_the_fleets_metrics(ctx, endpoint):
    # given principals of two tenants and a fleet operator
    holder = _Holder(PostgresPrincipals(ctx.store))
    operator = token_for(holder, "olga", ("operator", "admin", "auditor"), tenant="acme")
    fleet = token_for(holder, "prometheus", ("fleet_operator",), tenant="fleet")
    revoked = token_for(holder, "old-prometheus", ("fleet_operator",), tenant="fleet")
    holder.principals.revoke("fleet", "old-prometheus", "replaced")

    # when the endpoint is scraped without a token, with another scheme, with a token nobody
    # holds, with a revoked one, or with a tenant's operator's
    for authorization in (None, f"Basic {fleet}", "Bearer", "Bearer sft_" + "x" * 43,
                          f"Bearer {revoked}", "Bearer " + "y" * 5000):
        status, headers, body = _get(endpoint, authorization)
        # then it is refused as unauthenticated, naming what to send, never echoing it
        assert status == 401, authorization
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert "sagafleet_" not in body and fleet not in body and revoked not in body
    status, _, body = _get(endpoint, f"Bearer {operator}")
    assert status == 403 and "fleet_operator" in body and "sagafleet_" not in body
    assert operator not in body

    # when the fleet operator's token is sent (any case of the scheme)
    status, _, body = _get(endpoint, f"bearer {fleet}")
    # then the exposition is served
    assert status == 200 and "# TYPE sagafleet_sagas_started gauge" in body


def test_the_fleets_metrics_keep_each_tenants_series_apart(ctx, repo: PostgresSagaLog, endpoint):
    # given two tenants that each ran a saga of a definition named "trip", and a dead letter
    # of acme, one of globex (a replay) and one of no proven tenant
    for tenant, ending in (("acme", TripScript.completed), ("globex", TripScript.compensated)):
        script = TripScript(tenant=tenant)
        script.t = datetime.now(UTC) - timedelta(minutes=5)  # inside the scrape's window
        ending(script).write(repo)
    project_all(ctx)
    letters = DeadLetters(ctx.store)
    for n, (tenant, refusal) in enumerate((("acme", None), ("globex", "replayed"),
                                           (None, "unsigned"))):
        body = dead_letter_body("sagafleet.commands.start_saga", [], {"envelope": "{}"})
        letters.record("sagafleet.commands.start_saga", f"t-{n}", body, "r",
                       ErrorKind.INVALID_INPUT, tenant=tenant, refusal=refusal)
    token = token_for(_Holder(PostgresPrincipals(ctx.store)), "prometheus",
                      ("fleet_operator",), tenant="fleet")

    # when the fleet operator scrapes
    status, _, text = _get(endpoint, f"Bearer {token}")
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    # then each tenant's saga is its own series, never one "trip" of both
    def saga(name: str, tenant: str, **labels: str) -> float:
        key = tuple(sorted({"tenant": tenant, "definition": "trip", **labels}.items()))
        return samples[(name, key)]

    assert saga("sagafleet_sagas_finished", "acme", state="COMPLETED") == 1
    assert saga("sagafleet_sagas_finished", "acme", state="COMPENSATED") == 0
    assert saga("sagafleet_sagas_finished", "globex", state="COMPENSATED") == 1
    assert saga("sagafleet_sagas_started", "acme") == saga("sagafleet_sagas_started",
                                                            "globex") == 1
    assert not [key for key in samples if key[0] == "sagafleet_sagas_started"
                and "tenant" not in dict(key[1])]
    # and the dead letters are counted per tenant, "" for those no tenant is proven to own
    opened = {dict(labels)["tenant"]: value for (name, labels), value in samples.items()
              if name == "sagafleet_dead_letters_open"}
    assert opened == {"acme": 1, "globex": 1, "": 1}
    refused = {tuple(sorted(dict(labels).items())): value
               for (name, labels), value in samples.items()
               if name == "sagafleet_commands_refused_total"}
    assert refused == {(("refusal", "replayed"), ("tenant", "globex")): 1,
                       (("refusal", "unsigned"), ("tenant", "")): 1}


@pytest.fixture
def own_postgres() -> Iterator[tuple[Path, str]]:
    """An embedded PostgreSQL of this test's own (it stops it): (home, URL), migrated."""
    home = Path(tempfile.mkdtemp(prefix="sfm-", dir="/tmp"))
    try:
        url = embedded.start_postgres(home).url
        install_everything(url)
        yield home, url
    finally:
        embedded.stop_postgres(home)
        shutil.rmtree(home, ignore_errors=True)


def test_during_a_database_outage_only_a_token_admitted_before_is_served(own_postgres):
    home, url = own_postgres
    # given a worker's metrics endpoint whose directory is on its own PostgreSQL, a fleet
    # operator's token it admitted, and another fleet operator's it never saw
    admitted = issue_token(url, "prometheus", ("fleet_operator",), tenant="fleet")
    unseen = issue_token(url, "grafana", ("fleet_operator",), tenant="fleet")
    registry = WorkerMetrics().registry
    with EventStore.connect(url, pool_size=1, timeout=2.0) as store:
        server = MetricsHttpServer(FleetOnly(make_wsgi_app(registry), PostgresPrincipals(store)),
                                   host="127.0.0.1", port=0).start()
        try:
            assert _get(server.port, f"Bearer {admitted}")[0] == 200
            # when the database goes down
            embedded.stop_postgres(home)
            # then the admitted token is still served (what a worker did is most worth
            # seeing now), and the unseen one is refused: it cannot be checked
            status, _, body = _get(server.port, f"Bearer {admitted}")
            assert status == 200 and "sagafleet_worker_step_commands" in body
            status, _, body = _get(server.port, f"Bearer {unseen}")
            assert status == 503 and "cannot be checked" in body and unseen not in body
            assert _get(server.port, None)[0] == 401
        finally:
            server.close()
