"""Test helper: wait for the read models to hold every event written so far."""

from __future__ import annotations

import time

from projections import ProjectionContext, ProjectionRunner
from projections.status import lag_of


def project_all(ctx: ProjectionContext) -> None:
    """Catch the read model up with every event written. The horizon is the cluster's oldest
    open transaction, so another session's transaction (other tests share the server) can
    hold it back for a while: look again until nothing is behind."""
    runner = ProjectionRunner(ctx)
    for _ in range(3000):
        runner.catch_up()
        if lag_of(ctx, "sagas", 1)[1] == 0:
            return
        time.sleep(0.05)
    raise AssertionError("the read model never caught up with the log")


def project_database(database_url: str) -> None:
    """:func:`project_all` on the database at ``database_url``."""
    with ProjectionContext.connect(database_url) as ctx:
        project_all(ctx)
