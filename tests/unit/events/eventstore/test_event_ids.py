"""Fresh event ids: version-7 UUIDs whose random bits are never handed out twice, in this
process, its threads or a fork of it (they are read from the system in blocks)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from events.eventstore.model import new_event_id, new_event_ids


def test_fresh_ids_are_version_7_and_distinct_across_many_blocks() -> None:
    ids = new_event_ids(1000) + [new_event_id() for _ in range(3000)]
    assert len(set(ids)) == len(ids)
    assert {found.version for found in ids} == {7}
    assert {found.variant for found in ids} == {uuid.RFC_4122}


def test_threads_draw_ids_of_their_own() -> None:
    drawn: list[list[uuid.UUID]] = [[] for _ in range(4)]

    def draw(into: list[uuid.UUID]) -> None:
        into.extend(new_event_id() for _ in range(2000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [found for into in drawn for found in into]
    assert len(set(every)) == len(every)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_the_parents_unread_random_bytes() -> None:
    new_event_id()  # the parent now holds a block with unread bytes
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(read)
        os.write(write, "\n".join(str(new_event_id()) for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        childs = {uuid.UUID(line) for line in pipe.read().splitlines()}
    os.waitpid(child, 0)
    parents = {new_event_id() for _ in range(50)}
    # The random bits (all but the timestamp and version bits) differ between the two.
    mask = (1 << 74) - 1
    assert not {found.int & mask for found in childs} & {found.int & mask for found in parents}
    assert len(childs) == 50
