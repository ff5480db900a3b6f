"""Tenant windows (a gate's ``tenant_window``): the same promises on the in-memory and the
PostgreSQL ledgers — reserve within the limit, in the caller's unit, atomically against
every other unit; release; a sliding period; one window per tenant."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from contract_support import T0, Ports

from saga_core.approval.totals import WindowCall, WindowTotal

HOUR = timedelta(hours=1)
WINDOW = "payments.capture:amount"


class Boom(Exception):
    """Raised inside a unit to abandon it."""


def _call(key: str, amount: int, limit: int = 500, *, approved_over: bool = False) -> WindowCall:
    return WindowCall(WINDOW, key, Decimal(amount), Decimal(limit), HOUR, approved_over)


def _reserve(ports: Ports, call: WindowCall, tenant: str = "t", at: timedelta = timedelta()
             ) -> WindowTotal:
    with ports.log.unit_of_work() as unit:
        return ports.windows.reserve(tenant, call, T0 + at, unit)


def _total(ports: Ports, tenant: str = "t", at: timedelta = timedelta()) -> tuple[int, int]:
    total = ports.windows.total(tenant, WINDOW, HOUR, T0 + at)
    return int(total.before), total.calls


def test_calls_are_reserved_while_they_fit_and_refused_past_the_limit(ports: Ports) -> None:
    # given a window of 500 an hour
    first = _reserve(ports, _call("k1", 300))
    second = _reserve(ports, _call("k2", 200))
    # when a third call would pass it
    third = _reserve(ports, _call("k3", 1))
    # then the first two are reserved, the third refused with the window's total
    assert (first.reserved, second.reserved) == (True, True)
    assert (third.reserved, third.before, third.calls) == (False, Decimal(500), 2)
    assert _total(ports) == (500, 2)


def test_a_call_approved_over_the_window_is_reserved_whatever_the_total(ports: Ports) -> None:
    _reserve(ports, _call("k1", 500))
    over = _reserve(ports, _call("k2", 100, approved_over=True))
    assert over.reserved and over.before == Decimal(500)
    assert _total(ports) == (600, 2)


def test_reserving_the_same_operation_again_does_not_count_it_twice(ports: Ports) -> None:
    _reserve(ports, _call("k1", 400))
    again = _reserve(ports, _call("k1", 400), at=timedelta(minutes=5))  # a re-claim
    assert again.reserved and again.before == Decimal(0)
    assert _total(ports, at=timedelta(minutes=5)) == (400, 1)


def test_a_unit_that_does_not_commit_reserves_nothing(ports: Ports) -> None:
    with pytest.raises(Boom), ports.log.unit_of_work() as unit:
        assert ports.windows.reserve("t", _call("k1", 500), T0, unit).reserved
        raise Boom
    assert _total(ports) == (0, 0)
    assert _reserve(ports, _call("k2", 500)).reserved


def test_a_released_reservation_stops_counting(ports: Ports) -> None:
    _reserve(ports, _call("k1", 500))
    with ports.log.unit_of_work() as unit:
        assert ports.windows.release("t", ["k1", "never-reserved"], T0, unit) == 1
    assert _total(ports) == (0, 0)
    # a re-claim of the same operation counts it again
    assert _reserve(ports, _call("k1", 500)).reserved
    assert _total(ports) == (500, 1)


def test_a_release_in_a_unit_that_does_not_commit_releases_nothing(ports: Ports) -> None:
    _reserve(ports, _call("k1", 500))
    with pytest.raises(Boom), ports.log.unit_of_work() as unit:
        ports.windows.release("t", ["k1"], T0, unit)
        raise Boom
    assert _total(ports) == (500, 1)


def test_the_window_slides(ports: Ports) -> None:
    # given 300 reserved at T0 and 200 half an hour later
    _reserve(ports, _call("k1", 300))
    _reserve(ports, _call("k2", 200), at=timedelta(minutes=30))
    # an hour after T0 the first has left the window, the second has not
    assert _total(ports, at=HOUR) == (200, 1)
    assert _reserve(ports, _call("k3", 300), at=HOUR).reserved
    assert not _reserve(ports, _call("k4", 1), at=HOUR).reserved


def test_each_tenant_has_its_own_window_and_cannot_release_anothers(ports: Ports) -> None:
    _reserve(ports, _call("k1", 500), tenant="t")
    assert _reserve(ports, _call("k2", 500), tenant="other").reserved
    with ports.log.unit_of_work() as unit:
        assert ports.windows.release("other", ["k1"], T0, unit) == 0
    assert _total(ports, "t") == (500, 1) and _total(ports, "other") == (500, 1)


def test_racing_units_never_both_slip_under_the_limit(ports: Ports) -> None:
    # given twelve claimers racing for a window that has room for five calls of 100
    racers, room = 12, 5
    gate = threading.Barrier(racers)
    results: list[WindowTotal] = []
    lock = threading.Lock()

    def claim(index: int) -> None:
        gate.wait()
        with ports.log.unit_of_work() as unit:
            total = ports.windows.reserve("t", _call(f"k{index}", 100, limit=500), T0, unit)
        with lock:
            results.append(total)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then exactly five were reserved, each seeing what the ones before it committed
    reserved = [r for r in results if r.reserved]
    assert len(results) == racers and len(reserved) == room
    assert sorted(r.before for r in reserved) == [Decimal(100 * i) for i in range(room)]
    assert all(r.before == Decimal(500) for r in results if not r.reserved)
    assert _total(ports) == (500, room)
