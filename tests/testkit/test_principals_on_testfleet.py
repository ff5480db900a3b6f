"""Principals on a TestFleet: the in-memory directory proves people, and the SagaClient lets
each do only what one of its roles allows, recording nothing otherwise."""

from __future__ import annotations

import pytest
from trip_inputs import TRIP_INPUT

from saga_core.access.roles import NotPermitted, PrincipalKind, Unauthenticated
from saga_core.contracts import SagaStatus
from saga_core.engine.events import ApprovalGranted
from sagafleet.example_sagas import trip_definition
from sagafleet.testing import TestFleet

BIG_TRIP = {**TRIP_INPUT, "amount": 250_000}  # the capture needs an approval


def test_a_person_proven_by_its_token_approves_under_its_own_name() -> None:
    # given a trip waiting for its capture's approval
    fleet = TestFleet()
    saga_id = fleet.client(actor="booking-bot").start("trip", BIG_TRIP).saga_id
    fleet.run_until_idle()
    # when ada, an approver of the tenant, approves with the client her token proves
    ada = fleet.person("ada", roles={"approver"})
    assert ada.principal.authenticated and ada.principal.kind is PrincipalKind.PERSON
    ada.approve(saga_id, "capture_payment")
    fleet.run_until_idle()
    # then the grant names her, and the saga completes
    (grant,) = [e for e in fleet.events(saga_id) if isinstance(e, ApprovalGranted)]
    assert grant.approver == "ada"
    assert fleet.state(saga_id).status is SagaStatus.COMPLETED


def test_each_client_call_needs_a_role_that_allows_it_and_records_nothing_otherwise() -> None:
    fleet = TestFleet()
    saga_id = fleet.client().start("trip", BIG_TRIP).saga_id
    fleet.run_until_idle()
    before = fleet.state(saga_id).version
    auditor = fleet.person("audrey", roles={"auditor"})
    agent = fleet.client(actor="bot")
    # an auditor reads, and may do nothing else
    assert auditor.status(saga_id).saga_id == saga_id
    refusals = [
        lambda: auditor.cancel(saga_id, reason="no"),
        lambda: auditor.resolve(saga_id, "resume", reason="no"),
        lambda: auditor.start("trip", TRIP_INPUT),
        lambda: auditor.put_secret("tok_x"),
        lambda: auditor.submit_plan({"actions": []}),
        # an in-process agent may start and cancel, never resolve or register
        lambda: agent.resolve(saga_id, "resume", reason="no"),
        lambda: agent.register_definition(trip_definition()),
    ]
    for refused in refusals:
        with pytest.raises(NotPermitted, match="needs one of the roles"):
            refused()
    assert fleet.state(saga_id).version == before
    # an admin registers
    assert fleet.person("root", roles={"admin"}).register_definition(trip_definition())


def test_rotated_and_revoked_tokens_prove_nobody() -> None:
    fleet = TestFleet()
    first = fleet.principals.add("acme", "carol", "person", ["operator"]).token
    second = fleet.principals.rotate("acme", "carol").token
    with pytest.raises(Unauthenticated):
        fleet.authenticate(first)
    assert fleet.authenticate(second).name == "carol"
    fleet.principals.revoke("acme", "carol", "left")
    with pytest.raises(Unauthenticated):
        fleet.authenticate(second)
