"""A saga's step runs and compensations on one time axis (Gantt-style), drawn on the server as
SVG from the audited timeline.

:func:`gantt_bars` is the pure part: each attempt of an operation is a bar from its
``StepStarted`` to the event that ended it (succeeded, failed, outcome unknown), a wait for a
person is a bar from ``ApprovalRequested`` to its answer, and anything not ended yet runs to
``until`` (the saga's last event, or now while it is still open). One row per operation, in
the order it first appears, forwards and compensations apart. :func:`render_gantt` draws
them; the SVG carries classes only (the Content-Security-Policy refuses inline styles) and a
``<title>`` per bar that says what it was and how long it took.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from projections import TimelineEntry
from sagafleet.console.markup import Markup, html, join

__all__ = ["GanttBar", "gantt_bars", "render_gantt"]

ENDINGS: Final = {"StepSucceeded": "succeeded", "StepFailed": "failed",
                  "StepOutcomeUnknown": "unknown"}
ANSWERS: Final = {"ApprovalGranted": "granted", "ApprovalDenied": "denied"}
ROW_H: Final = 22
LABEL_W: Final = 230
WIDTH: Final = 1000


@dataclass(frozen=True)
class GanttBar:
    """One attempt of one operation, or one wait for a person."""

    step_id: str
    kind: str
    what: str  # "attempt 2", "waiting for a person"
    start: datetime
    end: datetime
    outcome: str  # succeeded, failed, unknown, running, waiting, granted, denied

    @property
    def row(self) -> tuple[str, str]:
        """The operation the bar belongs to (its row)."""
        return (self.step_id, self.kind)


def gantt_bars(timeline: Sequence[TimelineEntry], until: datetime) -> list[GanttBar]:
    """The bars of a saga's timeline (pure); open ones end at ``until``."""
    bars: list[GanttBar] = []
    running: dict[tuple[str, str], tuple[datetime, int]] = {}
    attempts: dict[tuple[str, str], int] = {}
    waiting: dict[tuple[str, str], datetime] = {}
    for entry in timeline:
        if not entry.step_id:
            continue
        key = (entry.step_id, entry.kind or "forward")
        if entry.type == "StepStarted":
            attempts[key] = attempts.get(key, 0) + 1
            running[key] = (entry.at, attempts[key])
        elif entry.type in ENDINGS and key in running:
            started, attempt = running.pop(key)
            bars.append(GanttBar(*key, f"attempt {attempt}", started, entry.at,
                                 ENDINGS[entry.type]))
        elif entry.type == "ApprovalRequested":
            waiting[key] = entry.at
        elif entry.type in ANSWERS and key in waiting:
            bars.append(GanttBar(*key, "waiting for a person", waiting.pop(key), entry.at,
                                 ANSWERS[entry.type]))
    for key, (started, attempt) in running.items():
        bars.append(GanttBar(*key, f"attempt {attempt}", started, max(until, started),
                             "running"))
    for key, asked in waiting.items():
        bars.append(GanttBar(*key, "waiting for a person", asked, max(until, asked), "waiting"))
    return sorted(bars, key=lambda bar: bar.start)


def _duration(bar: GanttBar) -> str:
    seconds = (bar.end - bar.start).total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def render_gantt(bars: Sequence[GanttBar], *, start: datetime, until: datetime) -> Markup:
    """The bars as an SVG chart, one row per operation (an empty note when none ran)."""
    if not bars:
        return html('<section id="gantt"><h2>Step runs</h2><p class="muted">No step has '
                    'started yet.</p></section>')
    rows: list[tuple[str, str]] = []
    for bar in bars:
        if bar.row not in rows:
            rows.append(bar.row)
    span = max((until - start).total_seconds(), 0.001)
    scale = (WIDTH - LABEL_W - 10) / span

    def x_of(moment: datetime) -> float:
        return LABEL_W + max(0.0, (moment - start).total_seconds()) * scale

    labels = join(html('<text class="gantt-label" x="4" y="{}">{}{}</text>',
                       index * ROW_H + 15, step_id,
                       " (compensation)" if kind == "compensation" else "")
                  for index, (step_id, kind) in enumerate(rows))
    shapes = join(html(
        '<rect class="gantt-bar {} {}" x="{:.1f}" y="{}" width="{:.1f}" height="{}" rx="2">'
        '<title>{} {}: {}, {} ({})</title></rect>',
        bar.outcome, bar.kind, x_of(bar.start), rows.index(bar.row) * ROW_H + 4,
        max(2.0, x_of(bar.end) - x_of(bar.start)), ROW_H - 8, bar.step_id, bar.kind, bar.what,
        bar.outcome, _duration(bar)) for bar in bars)
    height = len(rows) * ROW_H + 6
    legend = join(html('<span class="gantt-key {}">{}</span>', outcome, outcome)
                  for outcome in sorted({bar.outcome for bar in bars}))
    return html(
        '<section id="gantt"><h2>Step runs</h2><svg class="gantt" viewBox="0 0 {} {}" '
        'role="img" aria-label="Step runs and compensations over time, {} to {} UTC">'
        '<line class="gantt-axis" x1="{}" y1="0" x2="{}" y2="{}"></line>{}{}</svg>'
        '<p class="gantt-legend muted">{} · from {} to {} UTC</p></section>',
        WIDTH, height, start.strftime("%H:%M:%S"), until.strftime("%H:%M:%S"), LABEL_W,
        LABEL_W, height, labels, shapes, legend, start.strftime("%H:%M:%S"),
        until.strftime("%H:%M:%S"))
