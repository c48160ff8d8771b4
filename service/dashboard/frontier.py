"""The frontier chart: RS and LC under RDP and PLD, the paper's composition grey and
dashed beside them, the input models marked (points from ``service.plans.frontier``)."""

from __future__ import annotations

from service.dashboard.svg import Chart, Series
from service.plans.frontier import PAPER_LABEL, Frontier

STYLES = {
    "RS, RDP": ("#1f77b4", True),
    "RS, PLD": ("#1f77b4", False),
    "LC, RDP": ("#d62728", True),
    "LC, PLD (same weights)": ("#d62728", False),
    PAPER_LABEL: ("#999999", True),
}


def frontier_chart(frontier: Frontier, title: str) -> Chart:
    chart = Chart(title=title, x_label="epsilon", y_label="merged noise variance", log_y=True)
    for label, pts in frontier.series.items():
        color, dashed = STYLES[label]
        chart.series.append(Series(label, sorted(pts), dashed=dashed, color=color))
    chart.series.append(
        Series(
            "input models",
            [(e, v) for _, e, v in frontier.inputs],
            markers_only=True,
            color="#2ca02c",
        )
    )
    return chart
