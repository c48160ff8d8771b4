"""The SVG charts: a long legend label stays readable inside the picture."""

from __future__ import annotations

import re

from service.dashboard.svg import Chart, Series, render

CAVEAT = "LC, paper's composition (holds only if gradients do not depend on hidden state)"


def test_long_legend_label_wraps_inside_the_chart() -> None:
    chart = Chart(
        title="t",
        x_label="epsilon",
        y_label="accuracy",
        series=[
            Series("RS, PLD", [(1.0, 0.5), (2.0, 0.6)]),
            Series(CAVEAT, [(1.0, 0.4), (2.0, 0.5)], dashed=True),
            Series("input models", [(1.5, 0.55)], markers_only=True),
        ],
    )
    svg = render(chart)
    entries = list(re.finditer(r"<text [^>]*><title>([^<]*)</title>(.*?)</text>", svg))
    assert len(entries) == 3
    caveat = entries[1]
    assert caveat.group(1) == CAVEAT.replace("'", "&#x27;")  # the whole label, as a tooltip
    lines = re.findall(r"<tspan [^>]*>([^<]*)</tspan>", caveat.group(2))
    assert len(lines) > 1 and " ".join(lines).replace("&#x27;", "'") == CAVEAT
    legend_x = 720 - 170 + 30  # every line starts in the legend column ...
    assert all(len(line) <= 22 for line in lines)  # ... and fits its 140 px
    assert re.findall(r'<tspan x="([0-9.]+)"', caveat.group(2)) == [str(legend_x)] * len(lines)
    # the next entry starts below the wrapped one
    ys = [float(y) for y in re.findall(r'<text x="[0-9.]+" y="([0-9.]+)"><title>', svg)]
    assert ys == sorted(ys) and ys[2] - ys[1] >= 18 + 14 * (len(lines) - 1)
