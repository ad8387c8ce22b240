"""The geometry of the pages' inline SVG charts: a Gantt by zone, line charts and a heatmap.

Only numbers and plain text come out of here; templates/charts.html draws them, so every label
and tooltip is escaped by the template engine like the rest of the page. No script and nothing
fetched: the pages render inside Airflow's iframe as plain HTML, and hovering a shape shows its
``<title>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_provider_skynomad.planner.timeline import SegmentEnd

if TYPE_CHECKING:
    import numpy as np

KIND_COLOURS = {"spot": "#2f9e44", "on-demand": "#1c7ed6", "cold start": "#fab005", "idle": "#ced4da"}
SERIES = ["#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f03e3e", "#0ca678", "#5f3dc4", "#d6336c", "#495057"]
SHADES = ["#e03131", "#f76707", "#fcc419", "#94d82d", "#2f9e44"]  # none → all of the probes found capacity
NO_PROBE = "#e9ecef"


@dataclass
class Chart:
    """One SVG: its size and the shapes and texts in it, each a dict of coordinates and words."""

    width: int
    height: int
    texts: list[dict] = field(default_factory=list)  # x, y, text, cls, anchor
    lines: list[dict] = field(default_factory=list)  # x1, x2, y1, y2, cls
    rects: list[dict] = field(default_factory=list)  # x, y, w, h, fill, cls, tip
    markers: list[dict] = field(default_factory=list)  # x, y, glyph, colour, cls, tip
    polylines: list[dict] = field(default_factory=list)  # points, colour, dash, tip
    legend: list[dict] = field(default_factory=list)  # colour, label


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * step:
            step *= m
            break
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step) + 1)]


def gantt(bars, markers, lanes: list[str], span: float, deadline: float | None = None, width: int = 900) -> Chart:
    """Segments by zone (one lane per zone, plus an idle lane), preemption ✕ and migration ▶ markers."""
    lanes = [*lanes, "idle"] if any(b.kind == "idle" for b in bars) else list(lanes)
    left, lane_h, top = 170, 26, 10
    chart = Chart(width, top + lane_h * len(lanes) + 30)
    span = max(span, deadline or 0.0, 1e-6)
    x = lambda h: round(left + (width - left - 20) * h / span, 1)  # noqa: E731
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        chart.texts.append({"x": left - 8, "y": y + 17, "text": lane, "cls": "lane", "anchor": "end"})
        chart.lines.append({"x1": left, "x2": width - 20, "y1": y + lane_h, "y2": y + lane_h, "cls": "grid"})
    for bar in bars:
        i = lanes.index(bar.zone) if bar.zone in lanes else len(lanes) - 1
        tip = f"{bar.kind} in {bar.zone}, {bar.start:.2f}–{bar.end:.2f} h"
        if bar.usd_per_hour:
            tip += f", ${bar.usd_per_hour:.2f}/h"
        if bar.ended:
            tip += f", ended: {bar.ended}"
        w = round(max(1.0, x(bar.end) - x(bar.start)), 1)
        fill = KIND_COLOURS.get(bar.kind, "#868e96")
        y = top + i * lane_h + 4
        chart.rects.append(dict(x=x(bar.start), y=y, w=w, h=lane_h - 8, fill=fill, cls=f"bar {bar.kind}", tip=tip))
    for m in markers:
        i = lanes.index(m["zone"]) if m["zone"] in lanes else 0
        glyph, colour = ("✕", "#c92a2a") if m["kind"] == SegmentEnd.PREEMPTED else ("▶", "#343a40")
        y = round(top + i * lane_h + lane_h / 2 + 5, 1)
        tip = f"{m['kind']} at {m['at']:.2f} h: {m['why']}"
        cls = f"marker {m['kind']}"
        chart.markers.append(dict(x=x(m["at"]), y=y, glyph=glyph, colour=colour, cls=cls, tip=tip))
    if deadline:
        chart.lines.append(dict(x1=x(deadline), x2=x(deadline), y1=top, y2=chart.height - 25, cls="deadline"))
    for t in _ticks(0, span):
        chart.texts.append({"x": x(t), "y": chart.height - 8, "text": f"{t:g} h", "cls": "tick", "anchor": "middle"})
    return chart


def lines(
    series: list[tuple[str, list[tuple[float, float]], str]],
    x_label: str,
    y_label: str,
    verticals: list[tuple[float, str]] = (),
    width: int = 900,
    height: int = 260,
    x_format=lambda v: f"{v:g}",
) -> Chart | None:
    """Line chart: series of (label, [(x, y)], dash style), vertical rules, legend under the plot;
    None when no series has a point to draw."""
    points = [p for _, pts, _ in series for p in pts if all(map(math.isfinite, p))]
    if not points:
        return None
    xs = [p[0] for p in points] + [v for v, _ in verticals]
    ys = [p[1] for p in points] + [0.0]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) * 1.05 if max(ys) > min(ys) else min(ys) + 1
    left, right, top, bottom = 60, 20, 10, 30
    sx = lambda v: round(left + (width - left - right) * (v - x0) / (x1 - x0), 1)  # noqa: E731
    sy = lambda v: round(top + (height - top - bottom) * (1 - (v - y0) / (y1 - y0)), 1)  # noqa: E731
    chart = Chart(width, height)
    for t in _ticks(y0, y1, 4):
        chart.lines.append({"x1": left, "x2": width - right, "y1": sy(t), "y2": sy(t), "cls": "grid"})
        chart.texts.append({"x": left - 6, "y": round(sy(t) + 4, 1), "text": f"{t:g}", "cls": "tick", "anchor": "end"})
    for t in _ticks(x0, x1, 6):
        chart.texts.append({"x": sx(t), "y": height - 10, "text": x_format(t), "cls": "tick", "anchor": "middle"})
    for k, (v, label) in enumerate(verticals):  # labels one under the other: close rules stay readable
        chart.lines.append({"x1": sx(v), "x2": sx(v), "y1": top, "y2": height - bottom, "cls": "rule"})
        chart.texts.append(
            {"x": round(sx(v) - 4, 1), "y": top + 10 + 13 * k, "text": label, "cls": "rule-label", "anchor": "end"}
        )
    for i, (label, pts, dash) in enumerate(series):
        colour = SERIES[i % len(SERIES)]
        chart.legend.append({"colour": colour, "label": label})
        drawn = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in pts if math.isfinite(a) and math.isfinite(b))
        if drawn:
            chart.polylines.append({"points": drawn, "colour": colour, "dash": dash, "tip": label})
    chart.texts.append({"x": left, "y": height, "text": f"{x_label}; {y_label}", "cls": "axis", "anchor": None})
    return chart


def heatmap(rows: list[str], share: np.ndarray, column_labels: list[str], width: int = 1000) -> Chart | None:
    """Rows × time cells coloured by the share of probes that found capacity (grey: no probe); None when empty."""
    if not rows or share.size == 0:
        return None
    left, top, cell_h = 200, 6, 14
    n = share.shape[1]
    cell_w = (width - left - 10) / n
    chart = Chart(width, top + cell_h * len(rows) + 24)
    for i, row in enumerate(rows):
        y = top + i * cell_h
        chart.texts.append({"x": left - 6, "y": y + 11, "text": row, "cls": "lane", "anchor": "end"})
        values = share[i]
        j = 0
        while j < n:  # runs of equal colour are one rect: 50 markets × 120 buckets stays small
            colour = _cell_colour(values[j])
            k = j + 1
            while k < n and _cell_colour(values[k]) == colour:
                k += 1
            found = "no probe" if math.isnan(values[j]) else f"{100 * values[j]:.0f}% of probes found capacity"
            tip = f"{row} from {column_labels[j]}: {found}"
            x, w = round(left + j * cell_w, 1), round((k - j) * cell_w, 1)
            chart.rects.append(dict(x=x, y=y, w=w, h=cell_h - 1, fill=colour, cls="cell", tip=tip))
            j = k
    for j in range(0, n, max(1, n // 6)):
        x = round(left + j * cell_w, 1)
        chart.texts.append({"x": x, "y": chart.height - 6, "text": column_labels[j], "cls": "tick", "anchor": None})
    return chart


def _cell_colour(value: float) -> str:
    if math.isnan(value):
        return NO_PROBE
    return SHADES[int(round(float(value) * 4))]  # five shades from red (none) to green (always)
