"""A start answers with the saga's status view and whether it was new (``Started``), built
from the view's fields at once: the same view the status view, dumped and validated
again, gives (``view_of(...).model_dump()``, the plain path), for random sagas in every
state they pass through (approvals pending, escalations, compensation, budgets)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_properties import Driver, definitions

from application.client import Started
from application.views import SagaView, view_fields, view_of
from events.saga_log.port import LoadedSaga
from saga_core import SagaDefinition


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), data=st.data(), created=st.booleans())
def test_a_started_view_built_from_the_fields_is_the_one_the_dumped_view_gives(
    definition: SagaDefinition, data: st.DataObject, created: bool
) -> None:
    driver = Driver(definition, data)
    for version in range(1, 40):
        driver.orchestrate()
        loaded = LoadedSaga("p1", definition, driver.state, None, version)
        plain = Started(**view_of(loaded).model_dump(), created=created)
        assert Started(**view_fields(loaded), created=created) == plain
        assert SagaView(**view_fields(loaded)) == view_of(loaded)
        if driver.state.finished is not None or driver.state.escalation is not None:
            break
        if data.draw(st.booleans()):
            driver.now += timedelta(seconds=data.draw(st.floats(0, 120, allow_nan=False)))
        elif not driver.act():
            break
