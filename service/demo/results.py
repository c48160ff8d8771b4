"""What a demo run produces: its options, one row per release, and the whole result.

Plain records shared by ``run`` (which fills them) and ``report`` (which writes them);
neither of those imports the other's module for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]


@dataclass
class DemoOptions:
    out: Path = Path("retarget-demo")
    families: tuple[str, ...] = ("logreg", "mlp")
    #: (noise multiplier, clipping norm) per model of each family
    settings: tuple[tuple[float, float], ...] = ((0.7, 1.0), (0.7, 2.0), (1.2, 1.0), (2.5, 1.0))
    epochs: int = 20
    checkpoint_epochs: tuple[int, ...] = (10, 15, 20)
    targets: int = 6
    delta: float = 1e-5
    validation_targets: int = 2
    #: repetitions: each trains every setting again with fresh seeds and releases again
    seeds: tuple[int, ...] = (1, 2, 3)


@dataclass
class Row:
    """One released model on the frontier."""

    family: str
    method: str
    accountant: str
    objective: str
    target: float
    epsilon: float
    test_accuracy: float
    expected_test_accuracy: float | None
    weights: dict[str, float]
    release_id: str
    seed: int | None = None
    other_accountant_epsilon: float | None = None
    #: the paper's per-step composition for the same weights: a labelled comparison that
    #: holds only if gradients do not depend on hidden state, never the guarantee
    paper_epsilon: float | None = None


@dataclass
class Dashboard:
    """How to open the demo's data in the dashboard after the run."""

    data_dir: str
    key: str
    key_file: str
    command: str
    url: str


@dataclass
class DemoResult:
    options: DemoOptions
    inputs: list[dict[str, Any]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    infeasible: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    #: per (family, seed, target): the default plan's accuracy and the oracle's
    regret: list[dict[str, Any]] = field(default_factory=list)
    #: examples in each split of the data: train (private), validation (public), test
    split: dict[str, int] = field(default_factory=dict)
    dashboard: Dashboard | None = None
    seconds: float = 0.0
