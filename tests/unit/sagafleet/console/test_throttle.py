"""The sign-in throttle's arithmetic: free failures, doubling waits up to a cap, and keys that
hold no part of a token in clear (pure: no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sagafleet.console.throttle import (
    FIRST_DELAY_S,
    ThrottlePolicy,
    throttle_keys,
)


def test_attempts_wait_only_past_the_free_failures_doubling_up_to_the_cap() -> None:
    policy = ThrottlePolicy(free_failures=3, window=timedelta(minutes=15), max_delay_s=5)
    waits = [policy.delay_s(failures) for failures in range(9)]
    assert waits == [0, 0, 0, FIRST_DELAY_S, 1, 2, 4, 5, 5]


def test_a_flood_of_failures_caps_the_wait_without_overflowing() -> None:
    assert ThrottlePolicy(max_delay_s=10).delay_s(10**9) == 10


def test_a_policy_that_cannot_work_is_refused() -> None:
    for wrong in ({"free_failures": -1}, {"window": timedelta(0)}, {"max_delay_s": -1}):
        with pytest.raises(ValueError):
            ThrottlePolicy(**wrong)  # type: ignore[arg-type]


def test_keys_are_digests_of_the_address_and_of_the_tokens_first_characters() -> None:
    token = "sft_ABCDEFGH" + "x" * 35
    keys = throttle_keys("203.0.113.7", token)
    assert all(len(key) == 64 for key in keys)
    assert token[:12] not in keys.token and "203.0.113.7" not in keys.address
    # the same first characters share a key, whatever follows; another address does not
    assert throttle_keys("203.0.113.7", "sft_ABCDEFGH" + "y" * 35) == keys
    assert throttle_keys("203.0.113.8", token).address != keys.address


def test_an_ipv6_client_is_throttled_by_its_slash_64() -> None:
    one = throttle_keys("2001:db8:1:2::1", "t").address
    assert throttle_keys("2001:db8:1:2:ffff::9", "t").address == one
    assert throttle_keys("2001:db8:1:3::1", "t").address != one
    # an IPv4 client on a dual-stack socket is its IPv4 address
    assert throttle_keys("::ffff:203.0.113.7", "t") == throttle_keys("203.0.113.7", "t")
