"""A framework without MCP runs the exported functions through the same gateway."""

from __future__ import annotations

from gateway_support import TRIP_INPUT, recorded

from saga_core.access.roles import Principal, PrincipalKind
from sagafleet.gateway import FunctionRouter, GatewayService


def test_exported_start_function_starts_once_and_rejects_field_by_field(fleet):
    # given the router over a real fleet, acting for acme
    router = FunctionRouter(GatewayService(fleet))
    who = Principal.in_process_agent("acme", "fc-bot")
    args = {"input": TRIP_INPUT, "idempotency_key": "fc-1", "reason": "function calling"}
    # when the model calls start_trip twice with the same key
    first = router.call(who, "start_trip", args)
    again = router.call(who, "start_trip", args)
    # then one saga is started
    assert first["created"] and not again["created"] and first["saga_id"] == again["saga_id"]
    # when it forgets a field, mistypes another, and omits the reason
    bad = {"input": {**TRIP_INPUT, "nights": "2"} | {"currency": None}, "idempotency_key": "x"}
    rejected = router.call(who, "start_trip", bad)
    # then it gets a structured rejection naming the missing argument
    assert rejected["error"] == "ArgumentsRejected"
    assert "reason" in rejected["problems"][0]["message"]
    rejected = router.call(who, "start_trip", bad | {"reason": "again"})
    assert {(p["where"], p["rule"]) for p in rejected["problems"]} == {
        ("input.nights", "wrong_type"), ("input.currency", "wrong_type")}
    # and an unknown function is named as such
    assert router.call(who, "approve", {})["problems"][0]["rule"] == "unknown_function"
    # and another tenant cannot read the saga through the router either
    beta = Principal.in_process_agent("beta", "x")
    other = router.call(beta, "saga_status", {"saga_id": first["saga_id"]})
    assert other["error"] == "SagaNotFound"


def test_put_secret_returns_a_ref_that_starts_a_saga_for_its_tenant_only(fleet):
    # given an agent that deposits its card token through the gateway
    router = FunctionRouter(GatewayService(fleet))
    who = Principal.in_process_agent("acme", "fc-bot")
    put = router.call(who, "put_secret", {"value": TRIP_INPUT["card_token"]})
    assert set(put["secret_ref"]) == {"$secret_ref"} and put["expires_at"]
    assert TRIP_INPUT["card_token"] not in repr(put)
    # when another tenant tries the ref, it is unknown to it; acme's start uses it
    data = {"input": {**TRIP_INPUT, "card_token": put["secret_ref"]}, "reason": "by ref"}
    other = Principal.in_process_agent("beta", "x")
    beta = router.call(other, "start_trip", data | {"idempotency_key": "b"})
    assert beta["error"] == "SecretRefRejected"
    assert beta["problems"][0]["where"] == "input.card_token"
    started = router.call(who, "start_trip", data | {"idempotency_key": "a"})
    assert started["created"]
    # and a ttl out of range is named
    bad = router.call(who, "put_secret", {"value": "x", "ttl_seconds": 0})
    assert bad["problems"][0]["where"] == "ttl_seconds"


def test_a_principal_whose_roles_do_not_allow_it_gets_forbidden_and_nothing_is_done(
    fleet, database
):
    # given a saga an agent of acme started, and an auditor of acme
    router = FunctionRouter(GatewayService(fleet))
    agent = Principal.in_process_agent("acme", "fc-bot")
    started = router.call(agent, "start_trip", {"input": TRIP_INPUT, "idempotency_key": "fc-a",
                                                 "reason": "r"})
    auditor = Principal("acme", "ada", PrincipalKind.PERSON, frozenset({"auditor"}))
    before = recorded(database)
    # when the auditor calls every tool that starts, deposits, plans or cancels
    refused = {
        "start_trip": {"input": TRIP_INPUT, "idempotency_key": "fc-b", "reason": "r"},
        "start_saga": {"definition": "trip", "input": TRIP_INPUT, "idempotency_key": "fc-c",
                       "reason": "r"},
        "put_secret": {"value": "tok"},
        "propose_plan": {"steps": [{"tool": "hotels.hold", "args": {
            "hotel_id": "HT1", "nights": 1, "guest_email": "a@b.c"}}]},
        "cancel_saga": {"saga_id": started["saga_id"], "reason": "not mine to cancel"},
    }
    for name, arguments in refused.items():
        answer = router.call(auditor, name, arguments)
        # then each is a typed FORBIDDEN error naming the principal and the action
        assert answer["error"] == "NotPermitted" and answer["kind"] == "forbidden", answer
        assert "'ada'" in answer["message"] and answer["hint"]
    # and nothing was recorded
    assert recorded(database) == before
    # while reading is what an auditor may do
    assert router.call(auditor, "saga_status", {"saga_id": started["saga_id"]})["saga_id"] == \
        started["saga_id"]
    assert router.call(auditor, "saga_audit", {"saga_id": started["saga_id"]})["events"]



def test_propose_plan_with_revises_replans_the_same_saga(fleet):
    # given an agent's plan saga, started through the router
    router = FunctionRouter(GatewayService(fleet))
    who = Principal.in_process_agent("acme", "planner")
    flight = {"tool": "flights.hold", "args": {"flight_id": "LH1",
                                               "passenger_email": "a@example.com"}}
    hotel = {"tool": "hotels.hold", "args": {"hotel_id": "H1", "nights": 1,
                                             "guest_email": "a@example.com"}}
    other_hotel = {"tool": "hotels.hold", "args": {"hotel_id": "H2", "nights": 2,
                                                   "guest_email": "a@example.com"}}
    plan = router.call(who, "propose_plan", {"steps": [flight, hotel]})
    started = router.call(who, "start_saga", {"definition": plan["definition"], "input": {},
                                              "idempotency_key": "plan-1", "reason": "trip"})
    saga_id = started["saga_id"]
    # when it replans that saga: the same flight, another hotel
    revised = router.call(who, "propose_plan", {"steps": [flight, other_hotel],
                                                "revises": saga_id, "reason": "cheaper"})
    # then the same saga runs the new plan version, the flight's step kept by its id
    assert revised["accepted"] and revised["saga_id"] == saga_id and revised["revision"] == 1
    assert [s["step"] for s in revised["steps"]][0] == plan["steps"][0]["step"]
    assert len(revised["steps"]) == 2 and revised["steps"][1] != plan["steps"][1]
    # and the same revision again records nothing new
    again = router.call(who, "propose_plan", {"steps": [flight, other_hotel],
                                              "revises": saga_id})
    assert again["revision"] == 1
    # and another tenant's agent cannot revise it
    beta = Principal.in_process_agent("beta", "x")
    assert router.call(beta, "propose_plan", {"steps": [flight], "revises": saga_id})[
        "error"] == "SagaNotFound"
    # and once cancelled (compensating), a revision is refused, naming why
    router.call(who, "cancel_saga", {"saga_id": saga_id, "reason": "user gave up"})
    refused = router.call(who, "propose_plan", {"steps": [flight], "revises": saga_id})
    assert refused["error"] == "RevisionRefused" and refused["kind"] == "conflict", refused
    assert refused["problems"][0]["rule"] in ("saga_compensating", "saga_terminal")
