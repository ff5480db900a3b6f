"""Errors reach the agent as structured reports, never as tracebacks or server internals."""

from __future__ import annotations

from saga_core.errors import InputValidationError, PlanRejected, Problem
from sagafleet.example_sagas import trip_definition
from sagafleet.gateway import tool_error
from sagafleet.gateway.describe import outlook


def test_problems_keep_field_rule_and_message_and_carry_a_hint():
    # given a rejected input with two problems
    error = InputValidationError("trip", [Problem("input.nights", "wrong_type", "expected integer"),
                                          Problem("input.card_token", "missing", "required")])
    # when reported to the agent
    report = tool_error(error)
    # then every problem is there, by field and rule, with a hint what to do
    assert report["error"] == "InputValidationError"
    assert report["problems"] == [
        {"where": "input.nights", "rule": "wrong_type", "message": "expected integer"},
        {"where": "input.card_token", "rule": "missing", "message": "required"},
    ]
    assert "fix" in report["hint"]
    assert tool_error(PlanRejected([Problem("action 0", "unknown_tool", "x")]))["hint"]


def test_an_unexpected_error_hides_its_text():
    # given a crash whose message holds server details
    report = tool_error(RuntimeError("password=hunter2 at /srv/db"))
    # then the agent learns only that it was internal
    assert report["error"] == "InternalError" and "hunter2" not in str(report)


def test_outlook_says_when_an_approval_will_be_needed():
    # given the trip, whose capture needs approval above 100000
    trip = trip_definition()
    base = {"amount": 42_000}
    # when the amount is under the limit, then no approval is expected for the capture
    assert not any("capture_payment" in n for n in outlook(trip, base)["may_need_a_human"])
    # when it is over, then the reply says a person will approve, and why
    notes = outlook(trip, {"amount": 420_000})["may_need_a_human"]
    assert any("capture_payment" in n and "420000 > 100000" in n for n in notes)
    # and the pivot is always named
    assert any("send_itinerary" in n and "no return" in n for n in notes)


def test_scrub_hides_a_secret_wherever_it_is_echoed():
    # given a report where a provider echoed the card token inside a message
    from sagafleet.gateway.readable import REDACTED, scrub

    report = {"steps": [{"error": "card tok_visa_4242 declined", "attempt": 2}], "n": 1}
    # when scrubbed, then the token is gone and the rest is kept
    assert scrub(report, {"tok_visa_4242"}) == {
        "steps": [{"error": f"card {REDACTED} declined", "attempt": 2}], "n": 1}
