"""Who started a saga, why, with which model, prompt, request and trace, and on what input:
the context a person reads before deciding, at the top of a saga's page and of each queue item.

All of it is in the saga's first event (``SagaStarted``: ``actor``, ``reason``, ``lineage``,
``input``); the principal directory says what kind of principal the starter is (a person,
an agent, or one the directory does not know: a trusted in-process program). The input is
masked by the definition's secret fields (:func:`projections.masking.mask_input`) before
it reaches a page.

:func:`started_contexts` reads the first events of many sagas in one query (the queue page
asks for a page of them at once); :func:`context_of` is the pure part, from one event's data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from application.principals.directory import PrincipalDirectory, PrincipalNotFound
from events.saga_log.streams import STREAM_PREFIX
from projections import ProjectionContext
from projections.masking import mask_input
from saga_core.definitions.definition import SagaDefinition
from sagafleet.console.markup import Markup, html, join, pretty_json

__all__ = ["LINEAGE_FIELDS", "SagaContext", "context_of", "render_context", "started_contexts"]

LINEAGE_FIELDS: Final = (("model_name", "model"), ("model_version", "model version"),
                         ("prompt_version", "prompt"), ("agent_request_id", "request"),
                         ("trace_id", "trace"))
"""The lineage's fields, in the order and words a page shows them."""

_FIRST_EVENTS: Final = """
SELECT stream_id, data FROM eventstore.events
 WHERE stream_id = ANY(%s) AND stream_version = 1 AND event_type = 'SagaStarted'
"""


@dataclass(frozen=True)
class SagaContext:
    """Who asked for a saga and why, and its input with secrets masked."""

    saga_id: str
    starter: str
    starter_kind: str | None
    """``person`` or ``agent`` (the directory's word); None when the directory has no such
    principal (a trusted in-process program)."""
    reason: str
    lineage: tuple[tuple[str, str], ...]
    """(label, value) of each lineage field the start recorded."""
    input: Mapping[str, Any]

    @property
    def starter_text(self) -> str:
        """"ana (person)", "planner (agent)", "batch (not in the directory)"."""
        if not self.starter:
            return "unknown (not recorded)"
        return f"{self.starter} ({self.starter_kind or 'not in the directory'})"


def context_of(saga_id: str, started: Mapping[str, Any], definition: SagaDefinition | None,
               starter_kind: str | None) -> SagaContext:
    """One saga's context from its ``SagaStarted`` data (pure); without its definition the
    input is not shown (nothing would say which fields are secret)."""
    raw_lineage = started.get("lineage")
    lineage = raw_lineage if isinstance(raw_lineage, dict) else {}
    raw_input = started.get("input")
    saga_input = raw_input if isinstance(raw_input, dict) else {}
    return SagaContext(
        saga_id=saga_id, starter=str(started.get("actor") or ""), starter_kind=starter_kind,
        reason=str(started.get("reason") or ""),
        lineage=tuple((label, str(lineage[name])) for name, label in LINEAGE_FIELDS
                      if lineage.get(name)),
        input=mask_input(definition, saga_input) if definition is not None else {})


def _kind_of(directory: PrincipalDirectory, tenant: str, name: str,
             known: dict[str, str | None]) -> str | None:
    if name not in known:
        try:
            known[name] = str(directory.get(tenant, name).kind) if name else None
        except PrincipalNotFound:
            known[name] = None
    return known[name]


def started_contexts(ctx: ProjectionContext, directory: PrincipalDirectory, *, tenant: str,
                     saga_ids: Sequence[str],
                     definitions: Mapping[str, SagaDefinition | None]) -> dict[str, SagaContext]:
    """The context of each of ``tenant``'s sagas among ``saga_ids`` (one query for all);
    ``definitions`` maps a saga id to its definition (masks its input). A saga of another
    tenant is left out."""
    if not saga_ids:
        return {}
    with ctx.connection() as conn:
        rows = conn.execute(_FIRST_EVENTS,
                            ([STREAM_PREFIX + saga_id for saga_id in saga_ids],)).fetchall()
    known: dict[str, str | None] = {}
    found = {}
    for stream_id, data in rows:
        saga_id = str(stream_id).removeprefix(STREAM_PREFIX)
        if not isinstance(data, dict) or data.get("tenant") not in (None, "", tenant):
            continue
        kind = _kind_of(directory, tenant, str(data.get("actor") or ""), known)
        found[saga_id] = context_of(saga_id, data, definitions.get(saga_id), kind)
    return found


def render_context(context: SagaContext | None, *, with_input: bool = True) -> Markup:
    """The context as a definition list: starter, reason, lineage, and the masked input."""
    if context is None:
        return html('<p class="context muted">Who started this saga is not recorded.</p>')
    lineage = join(html('<span class="lineage-part"><span class="muted">{}</span> '
                        '<code>{}</code></span>', label, value)
                   for label, value in context.lineage)
    shown_input = (html("<dt>input</dt><dd>{}</dd>", pretty_json(dict(context.input)))
                   if with_input and context.input else Markup(""))
    return html('<dl class="context"><dt>started by</dt><dd class="starter">{}</dd>'
                '<dt>reason</dt><dd class="start-reason">{}</dd>'
                '<dt>lineage</dt><dd class="lineage">{}</dd>{}</dl>',
                context.starter_text, context.reason or html('<span class="muted">none '
                                                             'given</span>'),
                lineage or html('<span class="muted">none recorded</span>'), shown_input)
