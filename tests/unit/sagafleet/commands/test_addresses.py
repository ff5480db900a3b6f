"""Serving plain http where other machines can reach it is said out loud at start."""

from __future__ import annotations

import pytest

from sagafleet.commands.addresses import is_loopback, plain_http_warning


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "localhost", "LOCALHOST"])
def test_a_loopback_address_gets_no_warning(host: str) -> None:
    assert is_loopback(host)
    assert plain_http_warning("sagafleet console", host, 8080, "tokens") is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "console.example.com"])
def test_any_other_address_gets_one_naming_what_crosses_in_clear(host: str) -> None:
    warning = plain_http_warning("sagafleet console", host, 8080, "session cookies")
    assert warning is not None
    assert f"{host}:8080" in warning and "session cookies" in warning and "https" in warning
