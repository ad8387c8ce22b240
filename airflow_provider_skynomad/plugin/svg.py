"""Inline SVG charts drawn on the server: a Gantt by zone, line charts and a heatmap.

No script and nothing fetched: the pages render inside Airflow's iframe as plain HTML. Every
text goes through `esc`; hovering a shape shows its ``<title>``.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

KIND_COLOURS = {"spot": "#2f9e44", "on-demand": "#1c7ed6", "cold start": "#fab005", "idle": "#ced4da"}
SERIES = ["#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f03e3e", "#0ca678", "#5f3dc4", "#d6336c", "#495057"]


def esc(value) -> str:
    return escape(str(value), quote=True)


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


def gantt(bars, markers, lanes: list[str], span: float, deadline: float | None = None, width: int = 900) -> str:
    """Segments by zone (one lane per zone, plus an idle lane), preemption ✕ and migration ▶ markers."""
    lanes = [*lanes, "idle"] if any(b.kind == "idle" for b in bars) else list(lanes)
    left, lane_h, top = 170, 26, 10
    height = top + lane_h * len(lanes) + 30
    span = max(span, deadline or 0.0, 1e-6)
    x = lambda h: left + (width - left - 20) * h / span  # noqa: E731
    out = [f'<svg class="chart gantt" width="{width}" height="{height}" role="img" aria-label="segments by zone">']
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        out.append(f'<text x="{left - 8}" y="{y + 17}" text-anchor="end" class="lane">{esc(lane)}</text>')
        out.append(f'<line x1="{left}" x2="{width - 20}" y1="{y + lane_h}" y2="{y + lane_h}" class="grid"/>')
    for bar in bars:
        i = lanes.index(bar.zone) if bar.zone in lanes else len(lanes) - 1
        y = top + i * lane_h + 4
        w = max(1.0, x(bar.end) - x(bar.start))
        tip = f"{bar.kind} in {bar.zone}, {bar.start:.2f}–{bar.end:.2f} h"
        if bar.usd_per_hour:
            tip += f", ${bar.usd_per_hour:.2f}/h"
        if bar.ended:
            tip += f", ended: {bar.ended}"
        out.append(
            f'<rect x="{x(bar.start):.1f}" y="{y}" width="{w:.1f}" height="{lane_h - 8}" '
            f'fill="{KIND_COLOURS.get(bar.kind, "#868e96")}" class="bar {esc(bar.kind)}">'
            f"<title>{esc(tip)}</title></rect>"
        )
    for m in markers:
        i = lanes.index(m["zone"]) if m["zone"] in lanes else 0
        cx, cy = x(m["at"]), top + i * lane_h + lane_h / 2
        glyph, colour = ("✕", "#c92a2a") if m["kind"] == "preempted" else ("▶", "#343a40")
        out.append(
            f'<text x="{cx:.1f}" y="{cy + 5:.1f}" text-anchor="middle" fill="{colour}" class="marker {m["kind"]}">'
            f"{glyph}<title>{esc(m['kind'])} at {m['at']:.2f} h: {esc(m['why'])}</title></text>"
        )
    if deadline:
        out.append(
            f'<line x1="{x(deadline):.1f}" x2="{x(deadline):.1f}" y1="{top}" y2="{height - 25}" class="deadline"/>'
        )
    for t in _ticks(0, span):
        out.append(f'<text x="{x(t):.1f}" y="{height - 8}" text-anchor="middle" class="tick">{t:g} h</text>')
    out.append("</svg>")
    return "".join(out)


def lines(
    series: list[tuple[str, list[tuple[float, float]], str]],
    x_label: str,
    y_label: str,
    verticals: list[tuple[float, str]] = (),
    width: int = 900,
    height: int = 260,
    x_format=lambda v: f"{v:g}",
) -> str:
    """Line chart: series of (label, [(x, y)], dash style), vertical rules, legend under the plot."""
    points = [p for _, pts, _ in series for p in pts if all(map(math.isfinite, p))]
    xs = [p[0] for p in points] + [v for v, _ in verticals]
    ys = [p[1] for p in points] + [0.0]
    if not points:
        return '<p class="empty">nothing to draw yet</p>'
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) * 1.05 if max(ys) > min(ys) else min(ys) + 1
    left, right, top, bottom = 60, 20, 10, 30
    sx = lambda v: left + (width - left - right) * (v - x0) / (x1 - x0)  # noqa: E731
    sy = lambda v: top + (height - top - bottom) * (1 - (v - y0) / (y1 - y0))  # noqa: E731
    out = [f'<svg class="chart lines" width="{width}" height="{height}" role="img" aria-label="{esc(y_label)}">']
    for t in _ticks(y0, y1, 4):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end" class="tick">{t:g}</text>')
    for t in _ticks(x0, x1, 6):
        out.append(
            f'<text x="{sx(t):.1f}" y="{height - 10}" text-anchor="middle" class="tick">{esc(x_format(t))}</text>'
        )
    for k, (v, label) in enumerate(verticals):  # labels one under the other: close rules stay readable
        out.append(f'<line x1="{sx(v):.1f}" x2="{sx(v):.1f}" y1="{top}" y2="{height - bottom}" class="rule"/>')
        out.append(
            f'<text x="{sx(v) - 4:.1f}" y="{top + 10 + 13 * k}" text-anchor="end" class="rule-label">'
            f"{esc(label)}</text>"
        )
    for i, (label, pts, dash) in enumerate(series):
        pts = [p for p in pts if all(map(math.isfinite, p))]
        if not pts:
            continue
        path = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in pts)
        colour = SERIES[i % len(SERIES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}>'
            f"<title>{esc(label)}</title></polyline>"
        )
    out.append(f'<text x="{left}" y="{height - 0}" class="axis">{esc(x_label)}; {esc(y_label)}</text>')
    out.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="border-color:{SERIES[i % len(SERIES)]}"></i>{esc(label)}</span>'
        for i, (label, _, _) in enumerate(series)
    )
    return "".join(out) + f'<div class="legend">{legend}</div>'


def heatmap(rows: list[str], share: np.ndarray, column_labels: list[str], width: int = 1000) -> str:
    """Rows × time cells coloured by the share of probes that found capacity (grey: no probe)."""
    if not rows or share.size == 0:
        return '<p class="empty">no market observations in this window</p>'
    left, top, cell_h = 200, 6, 14
    n = share.shape[1]
    cell_w = (width - left - 10) / n
    height = top + cell_h * len(rows) + 24
    out = [
        f'<svg class="chart heatmap" id="availability-heatmap" width="{width}" height="{height}" role="img" '
        f'aria-label="availability by market and time">'
    ]
    for i, row in enumerate(rows):
        y = top + i * cell_h
        out.append(f'<text x="{left - 6}" y="{y + 11}" text-anchor="end" class="lane">{esc(row)}</text>')
        values = share[i]
        j = 0
        while j < n:  # runs of equal colour are one rect: 50 markets × 120 buckets stays small
            colour = _cell_colour(values[j])
            k = j + 1
            while k < n and _cell_colour(values[k]) == colour:
                k += 1
            label = "no probe" if math.isnan(values[j]) else f"{100 * values[j]:.0f}% of probes found capacity"
            out.append(
                f'<rect class="cell" x="{left + j * cell_w:.1f}" y="{y}" width="{(k - j) * cell_w:.1f}" '
                f'height="{cell_h - 1}" fill="{colour}"><title>{esc(row)} from {esc(column_labels[j])}: '
                f"{label}</title></rect>"
            )
            j = k
    step = max(1, n // 6)
    for j in range(0, n, step):
        out.append(f'<text x="{left + j * cell_w:.1f}" y="{height - 6}" class="tick">{esc(column_labels[j])}</text>')
    out.append("</svg>")
    return "".join(out)


def heatmap_legend() -> str:
    shades = ["#e03131", "#f76707", "#fcc419", "#94d82d", "#2f9e44"]
    labels = ["none", "¼", "½", "¾", "all"]
    keys = "".join(
        f'<span class="swatch" style="background:{c}"></span>{t}' for c, t in zip(shades, labels, strict=True)
    )
    none = '<span class="swatch" style="background:#e9ecef"></span>no probe'
    return f'<div class="legend">probes that found capacity: {keys}{none}</div>'


def _cell_colour(value: float) -> str:
    if math.isnan(value):
        return "#e9ecef"
    level = int(round(float(value) * 4))  # five shades from red (none) to green (always)
    return ["#e03131", "#f76707", "#fcc419", "#94d82d", "#2f9e44"][level]
