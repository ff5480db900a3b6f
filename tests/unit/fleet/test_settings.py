"""Settings come from SAGAFLEET_* variables once; a bad one is named in the error."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagafleet.settings import ConfigurationError, Settings


def test_no_urls_means_embedded_servers_under_home() -> None:
    settings = Settings.from_env({"SAGAFLEET_HOME": "/tmp/x"})
    assert settings.home == Path("/tmp/x")
    assert settings.embedded_database and settings.embedded_broker


def test_configured_urls_are_used_as_given() -> None:
    settings = Settings.from_env({
        "SAGAFLEET_DATABASE_URL": "postgresql://u@h/db",
        "SAGAFLEET_BROKER_URL": "redis://h:6379/0",
    })
    assert settings.database_url == "postgresql://u@h/db"
    assert not settings.embedded_database and not settings.embedded_broker


def test_malformed_variable_is_named() -> None:
    with pytest.raises(ConfigurationError, match="SAGAFLEET_LEASE_SECONDS"):
        Settings.from_env({"SAGAFLEET_LEASE_SECONDS": "soon"})
