"""What is derived from a definition alone, kept per process by the definition's identity.

A definition never changes under its content hash, so what is a pure function of it (a
start's fresh runs, its compiled templates, its literal secret values) is computed once and
looked up after. Each use keeps its own :class:`Derived` table, bounded: emptied when full
(a fleet runs a handful of definitions; a run of distinct ones only costs recomputing).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Derived(Generic[K, V]):
    """A table of values derived from definitions, by a key naming the definition (its
    content hash, alone or with a step and kind); at most ``limit`` entries."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._kept: dict[K, V] = {}

    def get(self, key: K, derive: Callable[[], V]) -> V:
        """The value kept under ``key``, else ``derive()``'s, kept from now on."""
        try:
            return self._kept[key]
        except KeyError:  # a miss (rare): even a derived None is kept, not derived again
            value = derive()
        if len(self._kept) >= self._limit:
            self._kept.clear()
        self._kept[key] = value
        return value
