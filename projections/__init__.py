"""Read models of the saga log: the runner, operator queue, metrics, audit, verify, rebuild."""

from typing import TYPE_CHECKING

from saga_core.lazy_faces import lazy_face

if TYPE_CHECKING:
    from projections.alerts import (
        Alert,
        AlertThresholds,
        business_alerts,
        platform_alerts,
        saga_alerts,
    )
    from projections.audit import AuditReport, BudgetStanding, TimelineEntry, audit, parse_position
    from projections.context import ProjectionContext, migrate
    from projections.errors import ProjectionError, RebuildConflict, UnknownProjection
    from projections.listing import SagaCursor, SagaPage, saga_page
    from projections.metrics import (
        DefinitionMetrics,
        Metrics,
        OperationMetrics,
        ToolMetrics,
        collect_metrics,
        collect_platform_metrics,
    )
    from projections.projector import Projector
    from projections.prometheus import exporter_app
    from projections.queue import operator_queue
    from projections.rebuild import RebuildProgress, RebuildReport, rebuild
    from projections.rows import QueueRow, SagaRows, StepRunRow, SummaryRow
    from projections.runner import BatchReport, ProjectionRunner
    from projections.saga_browse import BrowsePage, SagaFilter, browse_sagas
    from projections.status import ProjectionStatus, TableSetStatus, projection_status
    from projections.tables import PROJECTIONS
    from projections.verify import Difference, VerifyReport, verify

__all__ = [
    "PROJECTIONS",
    "Alert",
    "AlertThresholds",
    "AuditReport",
    "BatchReport",
    "BrowsePage",
    "BudgetStanding",
    "DefinitionMetrics",
    "Difference",
    "Metrics",
    "OperationMetrics",
    "ProjectionContext",
    "ProjectionError",
    "ProjectionRunner",
    "ProjectionStatus",
    "Projector",
    "QueueRow",
    "RebuildConflict",
    "RebuildProgress",
    "RebuildReport",
    "SagaCursor",
    "SagaFilter",
    "SagaPage",
    "SagaRows",
    "StepRunRow",
    "SummaryRow",
    "TableSetStatus",
    "TimelineEntry",
    "ToolMetrics",
    "UnknownProjection",
    "VerifyReport",
    "audit",
    "browse_sagas",
    "business_alerts",
    "collect_metrics",
    "collect_platform_metrics",
    "exporter_app",
    "migrate",
    "operator_queue",
    "parse_position",
    "platform_alerts",
    "projection_status",
    "rebuild",
    "saga_alerts",
    "saga_page",
    "verify",
]

# The names above are imported when first asked for (saga_core.lazy_faces): importing
# one module of the package does not import every module its face names.
__getattr__, __dir__ = lazy_face(__name__, __file__)
