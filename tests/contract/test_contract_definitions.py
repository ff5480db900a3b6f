"""Tenants own their definitions: the same promises on both implementations.

A tenant sees the shared, read-only built-in set and its own definitions; another tenant's
are absent to it (``DefinitionNotFound``, as if never registered); it may not register a
name the shared set holds; loading by content hash serves any owner's (a saga names it).
"""

from __future__ import annotations

import pytest
from contract_support import Ports, started, variant

from events import NO_STREAM, InvalidArgument
from events.definition_store.port import (
    DefinitionConflict,
    DefinitionNotFound,
    SharedDefinitionName,
)
from sagafleet.example_sagas import trip_definition


def test_a_tenants_definition_is_absent_to_another_tenant(ports: Ports) -> None:
    # given a definition tenant A registered
    mine = variant(trip_definition(), name="a_trip")
    ports.definitions.register(mine, tenant="A", registered_by="ada")
    # when tenant B looks for it, by name, at its version, in a listing or in a latest check
    # then it is not there at all, as for a name nobody registered
    with pytest.raises(DefinitionNotFound):
        ports.definitions.get("a_trip", tenant="B")
    with pytest.raises(DefinitionNotFound):
        ports.definitions.get("a_trip", mine.version, tenant="B")
    assert ports.definitions.list(tenant="B") == []
    with ports.log.unit_of_work() as unit:
        still_latest = ports.definitions.send_latest_check(unit, mine, tenant="B")
        ports.log.append("s1", "A", [started("s1", mine, "A")], NO_STREAM, unit=unit)
        assert not still_latest()
    # while tenant A sees it, recorded as its own
    assert ports.definitions.get("a_trip", tenant="A") == mine
    (record,) = ports.definitions.list(tenant="A")
    assert (record.name, record.tenant, record.shared, record.registered_by) == (
        "a_trip", "A", False, "ada")


def test_the_shared_set_is_seen_by_every_tenant(ports: Ports) -> None:
    # given the system's shared trip
    trip = trip_definition()
    digest = ports.definitions.register_shared(trip, registered_by="sagafleet")
    # then every tenant lists and loads it, marked shared
    for tenant in ("A", "B"):
        assert ports.definitions.get(trip.name, tenant=tenant) == trip
        assert ports.definitions.get(trip.name, trip.version, tenant=tenant) == trip
        (record,) = ports.definitions.list(tenant=tenant)
        assert (record.hash, record.tenant, record.shared) == (digest, None, True)
    # and registering it again changes nothing; other content at its version is refused
    assert ports.definitions.register_shared(trip) == digest
    with pytest.raises(DefinitionConflict):
        ports.definitions.register_shared(variant(trip, description="changed"))


def test_a_tenant_cannot_shadow_a_shared_name(ports: Ports) -> None:
    # given the shared trip
    trip = trip_definition()
    ports.definitions.register_shared(trip)
    # when a tenant registers other content under its name, at any version
    # then it is refused, naming the shared name, and nothing of the tenant's is stored
    for other in (variant(trip, description="mine"), variant(trip, version=trip.version + 1)):
        with pytest.raises(SharedDefinitionName, match="'trip'") as refused:
            ports.definitions.register(other, tenant="A")
        assert refused.value.name == "trip"
    assert ports.definitions.get(trip.name, tenant="A") == trip
    assert [r.shared for r in ports.definitions.list(tenant="A")] == [True]


def test_registering_the_shared_content_itself_is_a_no_op(ports: Ports) -> None:
    # given the shared trip (an agent may submit what it already sees)
    trip = trip_definition()
    digest = ports.definitions.register_shared(trip)
    # when a tenant registers exactly that content
    # then it gets the hash, and the name still means the shared definition
    assert ports.definitions.register(trip, tenant="A") == digest
    assert [r.tenant for r in ports.definitions.list(tenant="A")] == [None]


def test_one_name_registered_by_two_tenants_is_two_independent_definitions(
    ports: Ports,
) -> None:
    # given tenants A and B each register "refund" with their own content, B at two versions
    base = variant(trip_definition(), name="refund", version=1)
    for_a = variant(base, description="A's refund")
    for_b = variant(base, description="B's refund")
    for_b2 = variant(base, version=2, description="B's second refund")
    digest_a = ports.definitions.register(for_a, tenant="A")
    digest_b = ports.definitions.register(for_b, tenant="B")
    ports.definitions.register(for_b2, tenant="B")
    # then each tenant sees its own, latest version and all
    assert digest_a != digest_b
    assert ports.definitions.get("refund", tenant="A") == for_a
    assert ports.definitions.get("refund", tenant="B") == for_b2
    assert ports.definitions.get("refund", 1, tenant="B") == for_b
    with pytest.raises(DefinitionNotFound):
        ports.definitions.get("refund", 2, tenant="A")
    assert [r.hash for r in ports.definitions.list(tenant="A")] == [digest_a]
    # and loading by hash (what a saga's SagaStarted names) serves either
    assert ports.definitions.by_hash(digest_a) == for_a
    assert ports.definitions.by_hash(digest_b) == for_b


def test_the_same_content_registered_by_two_tenants_works_for_both(ports: Ports) -> None:
    # given the same content registered by two tenants (a plan named by its content)
    plan = variant(trip_definition(), name="plan-0123456789ab")
    ports.definitions.register(plan, tenant="A")
    ports.definitions.register(plan, tenant="B")
    # then each lists it as its own
    assert [r.tenant for r in ports.definitions.list(tenant="A")] == ["A"]
    assert [r.tenant for r in ports.definitions.list(tenant="B")] == ["B"]
    assert ports.definitions.by_hash(plan.content_hash()) == plan


def test_a_shared_name_added_later_is_what_the_name_means(ports: Ports) -> None:
    # given tenant A registered "trip" before the system shipped a shared "trip"
    own = variant(trip_definition(), description="A's own trip")
    ports.definitions.register(own, tenant="A")
    shipped = trip_definition()
    ports.definitions.register_shared(shipped)
    # then the name means the shared definition for A too (the shared set wins its names),
    # and A's own content still loads by hash for the sagas that run it
    assert ports.definitions.get("trip", tenant="A") == shipped
    assert [r.shared for r in ports.definitions.list(tenant="A")] == [True]
    assert ports.definitions.by_hash(own.content_hash()) == own


def test_a_lookup_without_a_tenant_is_refused(ports: Ports) -> None:
    ports.definitions.register_shared(trip_definition())
    for blank in ("", "  "):
        with pytest.raises(InvalidArgument):
            ports.definitions.get("trip", tenant=blank)
        with pytest.raises(InvalidArgument):
            ports.definitions.list(tenant=blank)
        with pytest.raises(InvalidArgument):
            ports.definitions.register(trip_definition(), tenant=blank)


@pytest.mark.parametrize("name", ["trip\x00x", "", "Trip", "trip\n", "x" * 129, 7])
def test_a_name_no_definition_can_have_is_invalid_input_not_a_lookup(ports: Ports,
                                                                    name: object) -> None:
    # given a registered trip
    ports.definitions.register(trip_definition(), tenant="A")
    # when a caller asks for a name no definition can have (a NUL in it, say)
    with pytest.raises(InvalidArgument) as caught:
        ports.definitions.get(name, tenant="A")  # type: ignore[arg-type]
    # then it is invalid input, told without quoting the name back
    assert caught.value.kind == "invalid_input"
    assert "\x00" not in str(caught.value) and "Trip" not in str(caught.value)


def test_a_tenant_holding_a_nul_is_invalid_input(ports: Ports) -> None:
    with pytest.raises(InvalidArgument):
        ports.definitions.get("trip", tenant="A\x00")
    with pytest.raises(InvalidArgument):
        ports.definitions.list(tenant="A\x00")
