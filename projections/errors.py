"""The projections room's typed errors, all under :class:`saga_core.errors.SagaError`."""

from __future__ import annotations

from saga_core.errors import SagaError


class ProjectionError(SagaError):
    """Root of every error the projections room raises on purpose."""


class UnknownProjection(ProjectionError):
    """No projection with that name (or no table set with that version) exists."""


class NothingToResolve(ProjectionError):
    """An operator action was asked for a saga that is not waiting for an operator."""


class RebuildConflict(ProjectionError):
    """Another rebuild of the same projection is in progress."""
