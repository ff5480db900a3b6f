"""saga_core.keys: what the mutation run of ``keys.py`` found no test for (issue 36).

``json_value_problem`` walks any mapping and any list or tuple, not only ``dict`` and
``list``; the operation key's fast path (an ``int`` version written out directly) and its
reference path (the canonical JSON encoder) agree, and anything but an ``int`` takes the
reference path.
"""

from __future__ import annotations

from decimal import Decimal
from types import MappingProxyType

import pytest

from saga_core import StepKind, operation_key, payload_hash
from saga_core.keys import json_value_problem


@pytest.mark.parametrize("holder", [
    MappingProxyType({"amount": float("nan")}),  # a mapping that is not a dict
    ({"amount": float("nan")},),  # a tuple, not a list
    [(1, float("inf"))],
])
def test_a_non_finite_number_is_found_inside_any_mapping_list_or_tuple(holder: object) -> None:
    assert json_value_problem({"args": holder}) is not None


def test_a_value_of_another_type_is_left_to_the_encoder_not_walked() -> None:
    # a Decimal or an object is not iterable: walking it would raise, not name a problem
    assert json_value_problem({"a": Decimal("1.5"), "b": object()}) is None


@pytest.mark.parametrize("kind", list(StepKind))
@pytest.mark.parametrize("version", [1, 2, 17])
def test_the_fast_key_of_an_int_version_is_the_canonical_hash(kind: StepKind,
                                                             version: int) -> None:
    assert operation_key("saga-1", "book_flight", kind, version) == payload_hash(
        ["saga-1", "book_flight", str(kind), version])


@pytest.mark.parametrize("version", ["2", True, 2.0])
def test_a_version_that_is_not_an_int_takes_the_reference_path(version: object) -> None:
    key = operation_key("saga-1", "book_flight", StepKind.FORWARD, version)  # type: ignore[arg-type]
    assert key == payload_hash(["saga-1", "book_flight", "forward", version])
