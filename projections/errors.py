"""The projections room's typed errors, all under :class:`saga_core.errors.SagaError`."""

from __future__ import annotations

from saga_core.errors import ErrorKind, SagaError


class ProjectionError(SagaError):
    """Root of every error the projections room raises on purpose."""


class UnknownProjection(ProjectionError):
    """No projection with that name (or no table set with that version) exists."""

    kind = ErrorKind.NOT_FOUND


class RebuildConflict(ProjectionError):
    """Another rebuild of the same projection is in progress."""

    kind = ErrorKind.CONFLICT
