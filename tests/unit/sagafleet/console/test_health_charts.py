"""The health page's pure parts: SVG charts over time, the window's buckets, the samples kept
of what the read model has no history of."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from projections.trends import TrendBucket, TrendWindow, UnknownWindow
from sagafleet.console.charts import Point, Series, bar_chart, line_chart
from sagafleet.console.health_history import HealthHistory, HealthSample

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
END = T0 + timedelta(hours=1)


def _percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def test_a_bar_per_measured_bucket_and_none_where_nothing_happened() -> None:
    points = [Point(T0 + timedelta(minutes=5 * i), value)
              for i, value in enumerate([0.5, None, 0.25, 0.0])]
    svg = str(bar_chart("Compensation rate", points, start=T0, end=END, bucket_s=300,
                        describe=_percent, css="compensation-rate"))
    bars = re.findall(r'<rect class="bar" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
                      r'height="([\d.]+)"><title>([^<]*)</title>', svg)
    # three bars (the bucket without a value has none), left to right, as tall as their value
    assert [title for *_, title in bars] == ["01 Dec 12:00 · 50%", "01 Dec 12:10 · 25%",
                                             "01 Dec 12:15 · 0%"]
    heights = [float(height) for _, _, _, height, _ in bars]
    assert heights[0] == pytest.approx(2 * heights[1]) and heights[2] == 0.0
    xs = [float(x) for x, *_ in bars]
    assert xs == sorted(xs)
    # the y axis is scaled to a round top (50% here) and labelled; a summary for screen readers
    assert ">50%</text>" in svg and ">25%</text>" in svg
    assert "<desc>3 values; latest 0%, highest 50%, lowest 0%</desc>" in svg


def test_no_style_attribute_and_no_script_in_any_chart() -> None:
    points = [Point(T0, 1.0), Point(T0 + timedelta(minutes=30), 2.0)]
    charts = [bar_chart("b", points, start=T0, end=END, bucket_s=300, describe=str),
              line_chart("l", [Series("a", points, "s1"), Series("b", points, "s2")],
                         start=T0, end=END, describe=str)]
    for chart in charts:
        assert " style=" not in str(chart) and "<script" not in str(chart)


def test_an_empty_window_says_so_instead_of_drawing_zeros() -> None:
    svg = str(bar_chart("Throughput", [Point(T0, None)], start=T0, end=END, bucket_s=300,
                        describe=str))
    assert "nothing to measure in this window" in svg and 'class="bar"' not in svg


def test_a_line_breaks_where_a_value_is_missing_and_titles_are_escaped() -> None:
    points = [Point(T0 + timedelta(minutes=m), v)
              for m, v in [(0, 1.0), (5, 2.0), (10, None), (15, 3.0), (20, 4.0)]]
    svg = str(line_chart("<b>lag</b>", [Series("p<50>", points)], start=T0, end=END,
                         describe=str))
    assert svg.count("<polyline") == 2  # two runs around the missing value
    assert svg.count("<circle") == 4
    assert "&lt;b&gt;lag&lt;/b&gt;" in svg and "<b>" not in svg
    assert "p&lt;50&gt;" in svg


def test_windows_are_aligned_buckets_that_end_after_now() -> None:
    window = TrendWindow.ending("6h", T0 + timedelta(minutes=7))
    assert (window.bucket_s, window.buckets) == (900, 24)
    assert window.end == T0 + timedelta(minutes=15)
    assert window.start == window.end - timedelta(hours=6)
    assert window.bucket_start(1) == window.start + timedelta(minutes=15)
    with pytest.raises(UnknownWindow, match="known: 1h, 6h, 24h, 7d"):
        TrendWindow.ending("1y", T0)


def test_a_bucket_has_no_rate_where_nothing_could_happen() -> None:
    empty = TrendBucket(start=T0, bucket_s=300)
    assert (empty.compensation_rate, empty.manual_intervention_rate,
            empty.retry_amplification, empty.throughput_per_min) == (None, None, None, 0.0)
    busy = TrendBucket(start=T0, bucket_s=300, started=4, escalated=1, finished=10,
                       compensated=2, operations_started=8, attempts=9, redeliveries=1)
    assert busy.throughput_per_min == 2.0
    assert (busy.compensation_rate, busy.manual_intervention_rate) == (0.2, 0.25)
    assert busy.retry_amplification == 1.25


def test_the_history_keeps_a_sample_per_interval_per_tenant_and_forgets_old_ones() -> None:
    history = HealthHistory(keep=timedelta(minutes=10), min_interval=timedelta(seconds=5))
    assert history.record("acme", HealthSample(T0, 0.5, 0))
    assert not history.record("acme", HealthSample(T0 + timedelta(seconds=2), 9.0, 9))
    assert history.record("globex", HealthSample(T0 + timedelta(seconds=2), 1.0, 1))
    assert history.record("acme", HealthSample(T0 + timedelta(minutes=11), 0.1, 2))
    # the first acme sample is older than the ten minutes kept; globex's is its own
    assert [s.lag_s for s in history.since("acme", T0 - timedelta(hours=1))] == [0.1]
    assert [s.alerts for s in history.since("globex", T0)] == [1]
    assert history.since("initech", T0) == []
