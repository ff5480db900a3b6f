"""The app Celery's tools load (``celery -A sagafleet.celery``): built from SAGAFLEET_*
settings on first access, never on import, with the fleet's task names and the remote
control switch; the worker's options follow the same switch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sagafleet.celery import tooling_app
from sagafleet.settings import ConfigurationError, Settings
from workers.celery_app import BrokerSettings, worker_options
from workers.fleet import FleetConfig
from workers.tasks import FLEET_TASKS, NotAFleetWorker

# Nothing listens on port 1: building the app must not need a broker.
NOWHERE = "redis://127.0.0.1:1/0"


def test_importing_the_app_path_builds_nothing_and_first_access_connects_to_nothing() -> None:
    # Given an environment whose broker does not exist and no database at all
    probe = (
        "import sagafleet.celery as m\n"
        "assert 'app' not in vars(m), 'built on import'\n"
        "from celery.app.utils import find_app\n"
        "app = find_app('sagafleet.celery')\n"
        "assert app is m.app\n"
        "print(app.conf.broker_url, app.conf.worker_enable_remote_control)\n"
    )
    # When Celery's -A lookup resolves the documented path
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "", "SAGAFLEET_BROKER_URL": NOWHERE})
    # Then it gets the app on the configured broker without having connected anywhere
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [NOWHERE, "True"]


def test_the_tooling_app_knows_every_task_name_and_runs_none() -> None:
    app = tooling_app(Settings.from_env({"SAGAFLEET_BROKER_URL": NOWHERE}))
    assert set(FLEET_TASKS) <= set(app.tasks)
    assert {"sagafleet.step", "sagafleet.commands.start_saga"} <= set(FLEET_TASKS)
    with pytest.raises(NotAFleetWorker, match="sagafleet worker"):
        app.tasks["sagafleet.step"].run("saga", "step", "forward", 1)


def test_remote_control_and_heartbeats_are_on_by_default_and_task_events_off() -> None:
    settings = Settings.from_env({"SAGAFLEET_BROKER_URL": NOWHERE})
    assert settings.celery_remote_control and not settings.celery_task_events
    app = tooling_app(settings)
    assert app.conf.worker_enable_remote_control
    assert "--without-heartbeat" not in worker_options(BrokerSettings(NOWHERE))
    # task events cost every step three broadcasts: only when asked for
    assert not app.conf.worker_send_task_events


def test_task_events_are_sent_when_asked_for_and_never_without_remote_control() -> None:
    asked = {"SAGAFLEET_BROKER_URL": NOWHERE, "SAGAFLEET_CELERY_TASK_EVENTS": "true"}
    assert tooling_app(Settings.from_env(asked)).conf.worker_send_task_events
    locked = tooling_app(Settings.from_env({**asked, "SAGAFLEET_CELERY_REMOTE_CONTROL": "no"}))
    assert not locked.conf.worker_send_task_events
    # and a fleet's own app follows its settings the same way
    config = FleetConfig(database_url="postgresql://nowhere/x", broker_url=NOWHERE,
                         task_events=True)
    assert config.broker_settings.task_events


def test_the_switch_turns_remote_control_events_and_heartbeats_off() -> None:
    settings = Settings.from_env({"SAGAFLEET_BROKER_URL": NOWHERE,
                                  "SAGAFLEET_CELERY_REMOTE_CONTROL": "false"})
    app = tooling_app(settings)
    assert not app.conf.worker_enable_remote_control
    assert not app.conf.worker_send_task_events
    assert "--without-heartbeat" in worker_options(
        BrokerSettings(NOWHERE, remote_control=False))


def test_a_malformed_switch_is_named() -> None:
    with pytest.raises(ConfigurationError, match="SAGAFLEET_CELERY_REMOTE_CONTROL"):
        Settings.from_env({"SAGAFLEET_CELERY_REMOTE_CONTROL": "maybe"})
