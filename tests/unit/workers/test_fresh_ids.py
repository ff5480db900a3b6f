"""The publisher's message ids: what ``str(uuid.uuid4())`` writes, drawn many at once."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from workers.publisher import fresh_ids


@given(st.integers(min_value=0, max_value=300))
def test_each_id_is_a_random_uuid_written_as_uuid4_writes_it(count: int) -> None:
    # when ids are drawn
    ids = fresh_ids(count)
    # then there are as many as asked, each a version 4 UUID of the RFC 4122 variant in its
    # canonical text, and no two alike
    assert len(ids) == count
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text
    assert len(set(ids)) == count


def test_draws_do_not_repeat_each_other() -> None:
    # when ids are drawn one and many at a time, then none repeats another
    drawn = [*fresh_ids(1), *fresh_ids(2), *fresh_ids(1000), *fresh_ids(1)]
    assert len(set(drawn)) == len(drawn)
