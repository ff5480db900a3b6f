"""The due-time index's rule: next_due never says "later" (or "never") when due_work would find
work, at any clock time, and never names an instant at which due_work finds nothing.

Random sagas (random definitions with timeouts, compensation deadlines and time limits,
driven through random outcomes, waits and approvals, as the core's invariant test drives
them) are checked after every settled commit against due_work at random clock times and at
every instant the state holds (found by walking it), alone or plus the queue wait or any
duration the definition declares, and just before and after each.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_properties import Driver, definitions

from application.claiming import ClaimAhead, claims_ahead
from saga_core import (
    SagaDefinition,
    SagaState,
    ToolCatalogue,
    check_claim,
    due_work,
    validate_definition,
)
from saga_core.approval.policy import grant_problem
from saga_core.definitions.budgets import SagaBudget
from saga_core.engine.decide import decide
from saga_core.engine.due import due_key, next_due, republish_at
from saga_core.engine.resolved_commands import resolve_arguments
from saga_core.engine.state import evolve
from saga_core.errors import TemplateError

TICK = timedelta(microseconds=1)


@st.composite
def timed_definitions(draw: st.DrawFn) -> SagaDefinition:
    """A random definition with some of the time rules: call timeouts, compensation
    deadlines, and a time limit for the whole saga."""
    plain = draw(definitions())
    data = plain.model_dump(mode="json")
    for step in data["steps"]:
        step["timeout_s"] = draw(st.sampled_from([None, None, 10.0, 45.0]))
        if step.get("compensation") is not None:
            deadline_s = draw(st.sampled_from([None, 20.0, 90.0]))
            if deadline_s is not None:
                step["compensation"]["deadline_s"] = deadline_s
                step["compensation"]["on_deadline"] = draw(
                    st.sampled_from(["escalate", "retry"]))
    limit = draw(st.sampled_from([None, None, 40.0, 200.0]))
    if limit is not None:
        data["budget"] = SagaBudget(time_limit_s=limit).model_dump(mode="json")
    tools = data.pop("tools")
    return validate_definition(SagaDefinition.model_validate(data),
                               ToolCatalogue.model_validate({"tools": tools}))


def _held(value: object) -> Iterator[datetime]:
    """Every instant the state holds, found by walking it (not by next_due's own list of
    instants, which the probes must not trust)."""
    if isinstance(value, datetime):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _held(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _held(item)
    elif hasattr(value, "__dict__") and not isinstance(value, SagaDefinition | type):
        for item in vars(value).values():
            yield from _held(item)


def _durations(value: object) -> Iterator[timedelta]:
    """Every duration a definition declares (its ``*_s`` settings: timeouts, deadlines,
    a time limit, approval windows, backoffs): instants held plus these are where rules
    compare the clock (a call's timeout from its start, a deadline from a completion)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("_s") and isinstance(item, int | float):
                yield timedelta(seconds=item)
            else:
                yield from _durations(item)
    elif isinstance(value, list):
        for item in value:
            yield from _durations(item)


def _probes(state: SagaState, queue_wait: timedelta, now: datetime,
            offsets: list[float]) -> list[datetime]:
    """Clock times to compare at: random ones, and every instant the state holds, plus the
    queue wait or any declared duration, with the moments just around each (where an
    off-by-one in a comparison would show)."""
    shifts = {timedelta(0), queue_wait, *_durations(state.definition.model_dump(mode="json"))}
    held = {at + shift + tick for at in _held(state) for shift in shifts
            for tick in (-TICK, timedelta(0), TICK)}
    drawn = [now + timedelta(seconds=s) for s in offsets]
    return sorted(at for at in {now, *held, *drawn, now + timedelta(days=30)} if at >= now)


def _check(state: SagaState, queue_wait: timedelta, now: datetime, offsets: list[float]) -> None:
    found = next_due(state, queue_wait, after=now)
    if found is not None:
        assert found >= now
        assert due_work(state, found, queue_wait), f"nothing is due at {found}"
    for at in _probes(state, queue_wait, now, offsets):
        if due_work(state, at, queue_wait):
            assert found is not None and found <= at, (
                f"due_work lists work at {at}; next_due said {found}")
            break  # the earliest probe with work decides; later ones only repeat it


def _check_excluding(state: SagaState, queue_wait: timedelta, now: datetime) -> None:
    """Leaving out what is due now (a sweeper that re-published it), the rest still counts."""
    excluded = {due_key(item) for item in due_work(state, now, queue_wait)}
    if not excluded:
        return
    found = next_due(state, queue_wait, after=now, exclude=excluded)
    for at in _probes(state, queue_wait, now, []):
        rest = [i for i in due_work(state, at, queue_wait) if due_key(i) not in excluded]
        if rest:
            assert found is not None and found <= at
            break
    else:
        assert found is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=timed_definitions(), data=st.data(),
       queue_wait=st.sampled_from([timedelta(0), timedelta(seconds=10)]))
def test_next_due_is_never_later_than_due_work_and_never_early(
    definition: SagaDefinition, data: st.DataObject, queue_wait: timedelta
) -> None:
    driver = Driver(definition, data)
    offsets = st.lists(st.floats(0, 400, allow_nan=False), max_size=6)
    for _ in range(60):
        driver.orchestrate()
        _check(driver.state, queue_wait, driver.now, data.draw(offsets))
        _check_excluding(driver.state, queue_wait, driver.now)
        if driver.state.finished is not None or driver.state.escalation is not None:
            break
        if data.draw(st.booleans()):  # let time pass: timeouts, deadlines, limits, expiries
            driver.now += timedelta(seconds=data.draw(st.floats(0, 120, allow_nan=False)))
        elif not driver.act():
            break


@st.composite
def budgeted_definitions(draw: st.DrawFn) -> SagaDefinition:
    """A timed definition whose tools cost something and whose budget leaves little slack
    (a claim ahead then moves a cost from owed to spent at the edge of the budget)."""
    timed = draw(timed_definitions())
    data = timed.model_dump(mode="json")
    for tool in data["tools"]:
        tool["cost"] = draw(st.sampled_from([0, 1, 2.5]))
    costs = {tool["name"]: tool["cost"] for tool in data["tools"]}
    needed = sum(costs[step["tool"]] for step in data["steps"])
    budget = data.get("budget") or {}
    data["budget"] = {**budget, "max_cost": needed + draw(st.sampled_from([0, 1, 2.5]))}
    tools = data.pop("tools")
    return validate_definition(SagaDefinition.model_validate(data),
                               ToolCatalogue.model_validate({"tools": tools}))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=st.one_of(timed_definitions(), budgeted_definitions()), data=st.data(),
       queue_wait=st.sampled_from([timedelta(0), timedelta(seconds=10)]))
def test_a_settled_commit_that_claims_ahead_leaves_decide_nothing(
    definition: SagaDefinition, data: st.DataObject, queue_wait: timedelta
) -> None:
    """A commit settles (decide has nothing more), then a worker's commit claims the steps
    due: ``decide`` still has nothing, so ``next_due(decided=())`` (which does not ask it at
    ``after``) answers as the plain ``next_due`` does, with the claims and without."""
    driver = Driver(definition, data)
    ahead = ClaimAhead(worker_id="w", lease=timedelta(seconds=30))
    for _ in range(60):
        driver.orchestrate()
        state, now = driver.state, driver.now
        claimed = state
        for claim in claims_ahead(state, now, ahead):
            claimed = evolve(claimed, claim.started)
        for settled in (state, claimed):
            assert decide(settled, now) == []
            assert (next_due(settled, queue_wait, after=now, decided=())
                    == next_due(settled, queue_wait, after=now))
        _check_claims_given_args(state, now, data.draw(st.floats(0, 400, allow_nan=False)))
        if state.finished is not None or state.escalation is not None:
            break
        if data.draw(st.booleans()):
            driver.now += timedelta(seconds=data.draw(st.floats(0, 120, allow_nan=False)))
        elif not driver.act():
            break


def _check_claims_given_args(state: SagaState, now: datetime, later_s: float) -> None:
    """A claim judged with the arguments its caller resolved (a claim ahead) gets the
    verdict of one that resolves them itself, now and later (a grant may have expired)."""
    for run in [*state.forward.values(), *state.compensation.values()]:
        try:
            args = resolve_arguments(state, run.step_id, run.kind)
        except TemplateError:
            continue
        for at in (now, now + timedelta(seconds=later_s)):
            plain = check_claim(state, run.step_id, run.kind, run.attempt, at)
            given = check_claim(state, run.step_id, run.kind, run.attempt, at, args=args)
            assert given == plain
            assert grant_problem(state, run, at, args=args) == grant_problem(state, run, at)


def test_a_finished_or_paused_saga_is_never_due() -> None:
    state = SagaState.initial(SagaDefinition(name="n", version=1, steps=[]))
    assert next_due(state, timedelta(0), after=datetime.now().astimezone()) is None


def test_republish_windows_double_from_base_then_step_by_cap() -> None:
    since = datetime(2026, 1, 1).astimezone()
    base, cap = timedelta(seconds=10), timedelta(seconds=60)

    def at(seconds: float) -> float:
        return (republish_at(since, since + timedelta(seconds=seconds), base, cap)
                - since).total_seconds()

    # Edges at 10, 30, 70 (gap 40), 130 (gap 60, capped), 190, 250, ...
    assert [at(0), at(10), at(29), at(30), at(70), at(129), at(130), at(1000)] == [
        10, 30, 30, 70, 130, 130, 190, 1030]


def test_republish_windows_refuse_a_base_that_cannot_grow() -> None:
    since = datetime(2026, 1, 1).astimezone()
    with pytest.raises(ValueError, match="base"):
        republish_at(since, since, timedelta(0), timedelta(seconds=5))
