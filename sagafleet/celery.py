"""The Celery app for Celery's own tools: ``celery -A sagafleet.celery inspect active``.

Built from the same ``SAGAFLEET_*`` settings as the command line (broker URL, the embedded
Redis under ``SAGAFLEET_HOME`` when unset), with the fleet's task names registered, so
``inspect ping|registered|active``, ``events`` and Flower work against a running fleet
unchanged. The answers come from the running ``sagafleet worker`` processes (their
remote control and events are on unless ``SAGAFLEET_CELERY_REMOTE_CONTROL=false``); this
app never runs a task of the fleet (:func:`workers.tasks.register_task_names`).

Importing the module builds nothing and connects to nothing: ``app`` is built on first
access (Celery's ``-A`` looks it up), and Celery itself connects only when a command runs.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from sagafleet import runtime
from sagafleet.settings import Settings
from workers.celery_app import BrokerSettings, create_celery_app
from workers.tasks import register_task_names


def tooling_app(settings: Settings) -> Celery:
    """The fleet's Celery app with its task names but no fleet behind them."""
    app = create_celery_app(BrokerSettings.for_visibility_timeout(
        runtime.broker_url(settings), settings.visibility_timeout_seconds,
        remote_control=settings.celery_remote_control,
        task_events=settings.celery_task_events,
        sentinel_master=settings.broker_sentinel_master))
    register_task_names(app)
    return app


def __getattr__(name: str) -> Any:
    """``app``, built from the environment on first access and kept for the process."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    app = tooling_app(Settings.from_env())
    globals()["app"] = app
    return app
