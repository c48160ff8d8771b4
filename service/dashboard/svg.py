"""Server-rendered SVG line charts: no plotting library, nothing fetched at run time."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
#: characters per legend line: the legend column is 140 px of 12 px text
LEGEND_CHARS = 22


@dataclass
class Series:
    label: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False
    markers_only: bool = False
    color: str | None = None
    #: one name per point: written beside it and in its tooltip
    labels: Sequence[str] | None = None


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    log_y: bool = False
    width: int = 720
    height: int = 440


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def render(chart: Chart) -> str:
    """The chart as a standalone SVG document."""
    pts = [p for s in chart.series for p in s.points if all(map(math.isfinite, p))]
    if chart.log_y:
        pts = [(x, y) for x, y in pts if y > 0]
    left, right, top, bottom = 70, 170, 40, 50
    w, h = chart.width - left - right, chart.height - top - bottom
    xs = [p[0] for p in pts] or [0.0, 1.0]
    ys = [math.log10(p[1]) if chart.log_y else p[1] for p in pts] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    pad = 0.05 * (y1 - y0)
    y0, y1 = y0 - pad, y1 + pad
    xpad = 0.03 * (x1 - x0)
    x0, x1 = x0 - xpad, x1 + xpad

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * w

    def sy(y: float) -> float:
        v = math.log10(y) if chart.log_y else y
        return top + h - (v - y0) / (y1 - y0) * h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{chart.width}" '
        f'height="{chart.height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{chart.width}" height="{chart.height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="15">{escape(chart.title)}</text>',
        f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>',
    ]
    for t in _ticks(x0, x1):
        px = sx(t)
        out.append(
            f'<line x1="{px:.1f}" y1="{top + h}" x2="{px:.1f}" y2="{top + h + 5}" stroke="#444"/>'
        )
        out.append(f'<text x="{px:.1f}" y="{top + h + 18}" text-anchor="middle">{t:g}</text>')
    for t in _ticks(y0, y1):
        py = top + h - (t - y0) / (y1 - y0) * h
        label = f"{10**t:.2g}" if chart.log_y else f"{t:g}"
        out.append(f'<line x1="{left - 5}" y1="{py:.1f}" x2="{left}" y2="{py:.1f}" stroke="#444"/>')
        out.append(f'<text x="{left - 8}" y="{py + 4:.1f}" text-anchor="end">{label}</text>')
    out.append(
        f'<text x="{left + w / 2}" y="{chart.height - 12}" text-anchor="middle">'
        f"{escape(chart.x_label)}</text>"
    )
    out.append(
        f'<text transform="translate(18,{top + h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(chart.y_label)}</text>"
    )
    ly = top + 14
    for k, s in enumerate(chart.series):
        color = s.color or PALETTE[k % len(PALETTE)]
        good = [(x, y) for x, y in s.points if math.isfinite(x) and math.isfinite(y)]
        good = [(x, y) for x, y in good if y > 0 or not chart.log_y]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
        if not s.markers_only and len(good) > 1:
            dash = ' stroke-dasharray="6,4"' if s.dashed else ""
            out.append(
                f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"{dash}/>'
            )
        names = dict(zip(s.points, s.labels, strict=False)) if s.labels else {}
        for x, y in good:
            name = names.get((x, y))
            if name is None:
                tip = f"{s.label}: epsilon {x:.4g}, {y:.3g}"
                out.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                    f"<title>{escape(tip)}</title></circle>"
                )
                continue
            tip = f"{name}: epsilon {x:.4g}, {y:.3g}"
            out.append(
                f'<g class="point"><circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" '
                f'fill="{color}"><title>{escape(tip)}</title></circle>'
                f'<text x="{sx(x) + 6:.1f}" y="{sy(y) - 6:.1f}" font-size="10" '
                f'fill="#333">{escape(name)}</text></g>'
            )
        if s.markers_only:
            out.append(f'<circle cx="{left + w + 18}" cy="{ly - 3}" r="4" fill="{color}"/>')
        else:
            dash = ' stroke-dasharray="4,3"' if s.dashed else ""
            out.append(
                f'<line x1="{left + w + 8}" y1="{ly - 3}" x2="{left + w + 26}" y2="{ly - 3}" '
                f'stroke="{color}" stroke-width="2"{dash}/>'
            )
        # a long label wraps inside the legend column (cut off, a caveat would not be read);
        # the whole label is also the entry's tooltip
        lines = textwrap.wrap(s.label, LEGEND_CHARS) or [s.label]
        spans = "".join(
            f'<tspan x="{left + w + 30}" dy="{0 if i == 0 else 14}">{escape(line)}</tspan>'
            for i, line in enumerate(lines)
        )
        out.append(
            f'<text x="{left + w + 30}" y="{ly + 1}"><title>{escape(s.label)}</title>{spans}</text>'
        )
        ly += 18 + 14 * (len(lines) - 1)
    out.append("</svg>")
    return "\n".join(out)
