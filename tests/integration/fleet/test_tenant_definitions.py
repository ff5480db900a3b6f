"""Tenants own their definitions, on the real fleet (PostgreSQL): through the client and the
gateway, tenant B can neither list, start nor read tenant A's definitions and sagas; nobody
shadows the shared trip; one name registered by two tenants is two definitions.

Each refusal is the answer for something absent (NOT_FOUND), and each leaves nothing
started or stored.
"""

from __future__ import annotations

import pytest
from principal_support import authenticated
from trip_inputs import TRIP_INPUT

from application.client import SagaClient
from events.definition_store.port import DefinitionNotFound, SharedDefinitionName
from events.saga_log.streams import SagaNotFound
from saga_core import SagaDefinition
from saga_core.access.roles import Principal
from saga_core.errors import ErrorKind
from sagafleet.example_sagas import trip_definition
from sagafleet.gateway import GatewayService
from workers.fleet import Fleet


def _own_trip(name: str, description: str) -> SagaDefinition:
    """The trip's steps under another name and description: a tenant's own definition."""
    return trip_definition().model_copy(update={"name": name, "description": description})


def _admin(fleet: Fleet, tenant: str) -> SagaClient:
    """An authenticated admin of ``tenant`` (registering needs the admin role)."""
    return fleet.client_for(authenticated(fleet, f"admin-{tenant}", ["admin"], tenant=tenant))


def _log_size(fleet: Fleet) -> int:
    with fleet.store.connection() as conn:
        row = conn.execute("SELECT count(*) FROM eventstore.events").fetchone()
    return int(row[0]) if row else 0


def test_tenant_b_can_neither_list_start_nor_read_tenant_as_definition_or_saga(fleet):
    # given tenant A's own definition and a saga of it
    _admin(fleet, "A").register_definition(_own_trip("a_trip", "A's trip"))
    agent_a = fleet.client(tenant="A", actor="agent-a")
    saga = agent_a.start("a_trip", TRIP_INPUT, key="a-1")
    # when tenant B's agent looks for them
    agent_b = fleet.client(tenant="B", actor="agent-b")
    events_before = _log_size(fleet)
    # then B lists only the shared trip, and every lookup answers "not found"
    assert [(r.name, r.shared) for r in fleet.definitions.list(tenant="B")] == [("trip", True)]
    with pytest.raises(DefinitionNotFound) as refused:
        agent_b.start("a_trip", TRIP_INPUT, key="b-1")
    assert refused.value.kind is ErrorKind.NOT_FOUND
    with pytest.raises(DefinitionNotFound):
        agent_b.start("a_trip", TRIP_INPUT, key="b-2", version=trip_definition().version)
    for read in (lambda: agent_b.status(saga.saga_id), lambda: agent_b.wait(saga.saga_id, 0),
                 lambda: fleet.repo.load(saga.saga_id, tenant="B")):
        with pytest.raises(SagaNotFound):
            read()
    assert agent_b.find("a-1") is None
    # and nothing was started by any of it
    assert _log_size(fleet) == events_before
    # while A sees its definition (and the shared trip) and its saga
    assert {r.name for r in fleet.definitions.list(tenant="A")} == {"a_trip", "trip"}
    assert agent_a.status(saga.saga_id).definition == "a_trip"


def test_the_gateway_lists_and_starts_only_the_callers_and_the_shared_definitions(fleet):
    # given tenant A's own definition
    _admin(fleet, "A").register_definition(_own_trip("a_trip", "A's trip"))
    gateway = GatewayService(fleet)
    as_a = Principal.in_process_agent("A", "agent-a")
    as_b = Principal.in_process_agent("B", "agent-b")
    # when each tenant's agent lists what it may start
    listed = {who.tenant: [d["name"] for d in gateway.list_sagas(who)["definitions"]]
              for who in (as_a, as_b)}
    # then A sees its own and the shared trip; B only the shared trip
    assert listed == {"A": ["a_trip", "trip"], "B": ["trip"]}
    # and B cannot start A's definition through the gateway either
    with pytest.raises(DefinitionNotFound):
        gateway.start_saga(as_b, "a_trip", TRIP_INPUT, "gw-b-1", "book it")
    assert gateway.start_saga(as_a, "a_trip", TRIP_INPUT, "gw-a-1", "book it")["created"]


def test_a_tenant_cannot_shadow_the_shared_trip(fleet):
    # given the shipped trip, shared by every tenant
    admin = _admin(fleet, "A")
    # when tenant A registers its own "trip", at the same version or the next
    for version in (trip_definition().version, trip_definition().version + 1):
        changed = _own_trip("trip", "A's trip").model_copy(update={"version": version})
        with pytest.raises(SharedDefinitionName, match="'trip'") as refused:
            admin.register_definition(changed)
        assert refused.value.kind is ErrorKind.CONFLICT
    # then "trip" still means the shared trip for A, and A has stored nothing
    assert [r.tenant for r in fleet.definitions.list(tenant="A")] == [None]
    started = fleet.client(tenant="A").start("trip", TRIP_INPUT, key="a-trip")
    assert fleet.repo.load(started.saga_id).definition == trip_definition()


def test_one_name_registered_by_two_tenants_runs_each_tenants_own_content(fleet):
    # given "refund_trip" registered by A and by B, each with its own content
    for tenant in ("A", "B"):
        _admin(fleet, tenant).register_definition(_own_trip("refund_trip", f"{tenant}'s"))
    # when each tenant starts it
    started = {tenant: fleet.client(tenant=tenant).start("refund_trip", TRIP_INPUT, key="r")
               for tenant in ("A", "B")}
    # then each saga runs (and names by hash) its own tenant's content
    for tenant, view in started.items():
        definition = fleet.repo.load(view.saga_id, tenant=tenant).definition
        assert definition.description == f"{tenant}'s"
    assert started["A"].saga_id != started["B"].saga_id
    # and a plan both tenants submit (named by its content) registers for each
    plan = {"goal": "hold a flight", "actions": [
        {"tool": "flights.hold",
         "args": {"flight_id": "FL1", "passenger_email": "ada@example.com"}}]}
    names = {tenant: fleet.client(tenant=tenant).submit_plan(plan).name for tenant in ("A", "B")}
    assert names["A"] == names["B"]
    for tenant in ("A", "B"):
        (record,) = [r for r in fleet.definitions.list(tenant=tenant) if r.name == names["A"]]
        assert record.tenant == tenant
