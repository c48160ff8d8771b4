"""The frontier chart: RS and LC under RDP and PLD, each method its own colour, the
paper's composition grey and dashed beside them, the input models marked and labelled
by name (points from ``service.plans.frontier``). The y axis is the dataset's metric
where the viewer may see one, else the merged noise variance, labelled as a proxy."""

from __future__ import annotations

from service.dashboard.svg import Chart, Series
from service.plans.frontier import PAPER_LABEL, Frontier

STYLES = {
    "RS, RDP": ("#1f77b4", True),
    "RS, PLD": ("#17becf", False),
    "LC, RDP": ("#d62728", True),
    "LC, PLD (same weights)": ("#ff7f0e", False),
    PAPER_LABEL: ("#999999", True),
}


def frontier_chart(frontier: Frontier, title: str) -> Chart:
    chart = Chart(
        title=title,
        x_label="certified epsilon",
        y_label=frontier.y_label,
        log_y=frontier.metric is None,
    )
    for label, pts in frontier.series.items():
        color, dashed = STYLES[label]
        chart.series.append(Series(label, sorted(pts), dashed=dashed, color=color))
    chart.series.append(
        Series(
            "input models",
            [(e, v) for _, e, v in frontier.inputs],
            markers_only=True,
            color="#2ca02c",
            labels=[name for name, _, _ in frontier.inputs],
        )
    )
    return chart
