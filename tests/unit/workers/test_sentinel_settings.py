"""A Redis Sentinel broker URL (kombu's ``sentinel://…;sentinel://…``) with its master's name:
one setting each, checked together at start-up, and carried to every Celery app the fleet
builds (workers, clients, the console and the MCP gateway all build theirs from FleetConfig),
whose connections then take messages with the fleet's atomic take. No server is needed: the
apps are built, never connected."""

from __future__ import annotations

import pytest

from sagafleet.celery import tooling_app
from sagafleet.fleetcli import _fleet
from sagafleet.settings import ConfigurationError, Settings
from workers.celery_app import (
    BrokerMisconfigured,
    BrokerSettings,
    broker_redis,
    create_celery_app,
)
from workers.reliable_redis import SentinelChannel, SentinelTransport, Transport

SENTINELS = "sentinel://:hunter2@127.0.0.1:1/0;sentinel://127.0.0.1:2/0"


def test_a_sentinel_url_without_the_master_name_stops_start_up_naming_the_setting() -> None:
    # given the issue's own attempt: Sentinels, and no master name
    # when the settings are read, then the error names the missing setting, not the URL
    with pytest.raises(ConfigurationError) as refused:
        Settings.from_env({"SAGAFLEET_BROKER_URL": SENTINELS})
    assert "SAGAFLEET_BROKER_SENTINEL_MASTER" in str(refused.value)
    assert "hunter2" not in str(refused.value) and "127.0.0.1" not in str(refused.value)


def test_a_master_name_without_a_sentinel_url_is_refused_rather_than_ignored() -> None:
    with pytest.raises(ConfigurationError, match="is not a sentinel:// URL"):
        Settings.from_env({"SAGAFLEET_BROKER_URL": "redis://127.0.0.1:1/0",
                           "SAGAFLEET_BROKER_SENTINEL_MASTER": "mymaster"})
    with pytest.raises(ConfigurationError, match="is not a sentinel:// URL"):
        Settings.from_env({"SAGAFLEET_BROKER_SENTINEL_MASTER": "mymaster"})


def test_every_app_the_fleet_builds_gets_the_master_name_and_the_atomic_take() -> None:
    # given Sentinels and their master's name
    settings = Settings.from_env({"SAGAFLEET_BROKER_URL": SENTINELS,
                                  "SAGAFLEET_BROKER_SENTINEL_MASTER": "mymaster"})
    # when the fleet's app (workers, clients, console, gateway) and Celery's tooling app
    # are built from them
    fleet = _fleet(settings, "postgresql://nowhere/db", SENTINELS)
    apps = [create_celery_app(fleet.config.broker_settings), tooling_app(settings)]
    # then each asks kombu for the master by name, through the fleet's Sentinel transport
    for app in apps:
        assert app.conf.broker_transport_options["master_name"] == "mymaster"
        with app.connection_for_write() as connection:
            assert isinstance(connection.transport, SentinelTransport)
            assert connection.transport.Channel is SentinelChannel
    # and a plain Redis URL keeps the plain atomic-take transport
    plain = create_celery_app(BrokerSettings(broker_url="redis://127.0.0.1:1/0"))
    assert "master_name" not in plain.conf.broker_transport_options
    with plain.connection_for_write() as connection:
        assert type(connection.transport) is Transport


def test_the_sentinel_channel_keeps_the_take_and_kombus_sentinel_options() -> None:
    options = SentinelChannel.from_transport_options
    assert "queue_wait_timeout" in options  # the fleet's take
    assert {"master_name", "min_other_sentinels", "sentinel_kwargs"} <= set(options)
    assert len(options) == len(set(options))


def test_broker_settings_and_the_plain_client_refuse_a_sentinel_url_without_its_master() -> None:
    with pytest.raises(BrokerMisconfigured):
        BrokerSettings(broker_url=SENTINELS)
    with pytest.raises(BrokerMisconfigured):
        BrokerSettings(broker_url="redis://127.0.0.1:1/0", sentinel_master="mymaster")
    with pytest.raises(BrokerMisconfigured):
        broker_redis(SENTINELS)
    # with the name, the plain client is the master's, found through the Sentinels
    client = broker_redis(SENTINELS, "mymaster")
    pool = client.connection_pool
    assert pool.service_name == "mymaster"  # type: ignore[attr-defined]
    assert [s.connection_pool.connection_kwargs["port"]  # type: ignore[attr-defined]
            for s in pool.sentinel_manager.sentinels] == [1, 2]  # type: ignore[attr-defined]
    assert pool.connection_kwargs["password"] == "hunter2"
