"""Charts over time as inline SVG, drawn on the server (no script, no style attribute).

A chart is a time axis from ``start`` to ``end`` and one or more series of points on it:
:func:`bar_chart` for one value per bucket (a missing value draws no bar, so "nothing
happened" is not drawn as a zero rate), :func:`line_chart` for samples or several series.
Colours and sizes come from classes (``chart``, ``bar``, ``line s1`` …) in
``static/console.css``: the Content-Security-Policy refuses ``style=`` attributes and
inline scripts. Every bar and point carries a ``<title>`` with its time and value (what a
pointer shows), and every chart a text summary for screen readers. Every value goes
through :func:`~sagafleet.console.markup.html`, so it is escaped like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sagafleet.console.markup import Markup, html, join

__all__ = ["Point", "Series", "bar_chart", "line_chart"]

WIDTH = 600
HEIGHT = 170
_LEFT = 48  # room for the y-axis labels
_RIGHT = 8
_TOP = 10
_BOTTOM = 24  # room for the time labels
_PLOT_W = WIDTH - _LEFT - _RIGHT
_PLOT_H = HEIGHT - _TOP - _BOTTOM

Describe = Callable[[float], str]


@dataclass(frozen=True)
class Point:
    """A value at a time (``value`` None: nothing to measure then)."""

    at: datetime
    value: float | None


@dataclass(frozen=True)
class Series:
    """A named line; ``css`` picks its colour class (``s1``, ``s2``, …)."""

    label: str
    points: Sequence[Point]
    css: str = "s1"


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``value``."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** _floor_log10(value)
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * magnitude:
            return step * magnitude
    return 10.0 * magnitude  # pragma: no cover - the loop ends at 10


def _floor_log10(value: float) -> int:
    exponent = 0
    while value >= 10.0:
        value /= 10.0
        exponent += 1
    while value < 1.0:
        value *= 10.0
        exponent -= 1
    return exponent


class _Frame:
    """Maps times and values to the plot's coordinates."""

    def __init__(self, start: datetime, end: datetime, top: float) -> None:
        self.start, self.end, self.top = start, end, top
        self.span = max((end - start).total_seconds(), 1.0)

    def x(self, at: datetime) -> float:
        offset = (at - self.start).total_seconds() / self.span
        return round(_LEFT + min(max(offset, 0.0), 1.0) * _PLOT_W, 1)

    def y(self, value: float) -> float:
        return round(_TOP + _PLOT_H - min(value / self.top, 1.0) * _PLOT_H, 1)

    def width(self, seconds: float) -> float:
        return max(round(seconds / self.span * _PLOT_W, 1), 1.0)


def _axes(frame: _Frame, describe: Describe) -> Markup:
    """The frame: baseline, the top and middle gridlines with their values, the time ends."""
    base = _TOP + _PLOT_H
    middle = frame.y(frame.top / 2)
    return html(
        '<line class="axis" x1="{l}" y1="{b}" x2="{r}" y2="{b}"/>'
        '<line class="grid" x1="{l}" y1="{t}" x2="{r}" y2="{t}"/>'
        '<line class="grid" x1="{l}" y1="{m}" x2="{r}" y2="{m}"/>'
        '<text class="tick" x="{lx}" y="{ty}" text-anchor="end">{top}</text>'
        '<text class="tick" x="{lx}" y="{my}" text-anchor="end">{mid}</text>'
        '<text class="tick" x="{lx}" y="{by}" text-anchor="end">0</text>'
        '<text class="tick" x="{l}" y="{timey}">{first}</text>'
        '<text class="tick" x="{r}" y="{timey}" text-anchor="end">{last}</text>',
        l=_LEFT, r=_LEFT + _PLOT_W, b=base, t=_TOP, m=middle, lx=_LEFT - 4,
        ty=_TOP + 4, my=middle + 4, by=base + 4, top=describe(frame.top),
        mid=describe(frame.top / 2), timey=HEIGHT - 6,
        first=_clock(frame.start), last=_clock(frame.end))


def _clock(at: datetime) -> str:
    return at.strftime("%d %b %H:%M")


def _svg(title: str, summary: str, css: str, body: Markup) -> Markup:
    return html(
        '<figure class="chart-card {}"><figcaption>{}</figcaption>'
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        '<desc>{}</desc>{}</svg></figure>',
        css, title, WIDTH, HEIGHT, title, summary, body)


def _empty(frame: _Frame, describe: Describe) -> Markup:
    return html('{}<text class="empty" x="{}" y="{}" text-anchor="middle">'
                'nothing to measure in this window</text>',
                _axes(frame, describe), _LEFT + _PLOT_W / 2, _TOP + _PLOT_H / 2)


def _summary(points: Sequence[Point], describe: Describe) -> str:
    values = [p.value for p in points if p.value is not None]
    if not values:
        return "no values in this window"
    return (f"{len(values)} values; latest {describe(values[-1])}, "
            f"highest {describe(max(values))}, lowest {describe(min(values))}")


def bar_chart(title: str, points: Sequence[Point], *, start: datetime, end: datetime,
              bucket_s: float, describe: Describe, css: str = "") -> Markup:
    """One bar per bucket starting at each point's time; ``describe`` formats a value."""
    values = [p.value for p in points if p.value is not None]
    frame = _Frame(start, end, _nice_ceiling(max(values, default=0.0)))
    if not values:
        return _svg(title, _summary(points, describe), css, _empty(frame, describe))
    width = frame.width(bucket_s)
    gap = min(2.0, width / 4)
    bars = join(
        html('<rect class="bar" x="{}" y="{}" width="{}" height="{}">'
             '<title>{} · {}</title></rect>',
             frame.x(p.at) + gap / 2, frame.y(p.value), round(width - gap, 1),
             round(_TOP + _PLOT_H - frame.y(p.value), 1), _clock(p.at), describe(p.value))
        for p in points if p.value is not None)
    return _svg(title, _summary(points, describe), css,
                html('{}<g class="bars">{}</g>', _axes(frame, describe), bars))


def line_chart(title: str, series: Sequence[Series], *, start: datetime, end: datetime,
               describe: Describe, css: str = "") -> Markup:
    """Each series as a line through its points (a missing value breaks the line), with a
    legend when there is more than one."""
    values = [p.value for s in series for p in s.points if p.value is not None]
    frame = _Frame(start, end, _nice_ceiling(max(values, default=0.0)))
    everything = [p for s in series for p in s.points]
    if not values:
        return _svg(title, _summary(everything, describe), css, _empty(frame, describe))
    drawn = join(_line(s, frame, describe) for s in series)
    legend = Markup("")
    if len(series) > 1:
        legend = join(
            html('<g class="legend {}"><rect x="{}" y="{}" width="10" height="10"/>'
                 '<text x="{}" y="{}">{}</text></g>',
                 s.css, _LEFT + 8 + i * 90, _TOP, _LEFT + 22 + i * 90, _TOP + 9, s.label)
            for i, s in enumerate(series))
    summary = "; ".join(f"{s.label}: {_summary(s.points, describe)}" for s in series)
    return _svg(title, summary, css, html('{}{}{}', _axes(frame, describe), drawn, legend))


def _line(series: Series, frame: _Frame, describe: Describe) -> Markup:
    runs: list[list[Point]] = [[]]
    for point in series.points:
        if point.value is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(point)
    paths = join(
        html('<polyline class="line {}" points="{}"/>', series.css,
             " ".join(f"{frame.x(p.at)},{frame.y(p.value or 0.0)}" for p in run))
        for run in runs if len(run) > 1)
    dots = join(
        html('<circle class="dot {}" cx="{}" cy="{}" r="2.5"><title>{} · {}: {}</title>'
             '</circle>', series.css, frame.x(p.at), frame.y(p.value), _clock(p.at),
             series.label, describe(p.value))
        for p in series.points if p.value is not None)
    return html('<g class="series">{}{}</g>', paths, dots)
