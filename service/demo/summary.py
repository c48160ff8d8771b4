"""The demo's numbers over seeds: mean and spread of each method's accuracy at each
target, and the one sentence that says what they show.

RS is compared by its expected accuracy (sum_i pi_i times model i's test accuracy),
which is what a caller gets on average; the drawn model's own accuracy is in the
report's per-seed table. LC is compared by the accuracy of the released model. Both
under PLD, the tighter accountant, and LC under the sound bound (the service's only
LC guarantee; the paper's per-step composition is never used for a release).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from service.demo.results import DemoResult, Row

#: what the paper's composition needs, written wherever its curve or number is shown
PAPER_LABEL = "holds only if gradients do not depend on hidden state"


@dataclass(frozen=True)
class Stat:
    """Accuracies of one (family, method, accountant, objective, target) over seeds."""

    family: str
    method: str
    accountant: str
    objective: str
    target: float
    epsilon: float  # the largest certified epsilon over seeds (the same plan each time)
    values: tuple[float, ...]  # released test accuracy, one per seed
    expected: tuple[float, ...]  # RS: expected test accuracy, one per seed
    paper_epsilon: float | None
    models: int  # the most models any seed's release merged or mixed

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def compared(self) -> tuple[float, ...]:
        """What the headline compares: RS's expected accuracy, LC's released one."""
        return self.expected if self.method == "rs" else self.values

    @property
    def mean(self) -> float:
        return statistics.fmean(self.compared)

    @property
    def sd(self) -> float:
        """Sample standard deviation over seeds (0 with one seed)."""
        return statistics.stdev(self.compared) if self.n > 1 else 0.0


def stats(result: DemoResult) -> list[Stat]:
    groups: dict[tuple[str, str, str, str, float], list[Row]] = {}
    for r in result.rows:
        groups.setdefault((r.family, r.method, r.accountant, r.objective, r.target), []).append(r)
    out = []
    for (family, method, acc, objective, target), rows in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][4], kv[0][1], kv[0][2], kv[0][3])
    ):
        papers = [r.paper_epsilon for r in rows if r.paper_epsilon is not None]
        out.append(
            Stat(
                family=family,
                method=method,
                accountant=acc,
                objective=objective,
                target=target,
                epsilon=max(r.epsilon for r in rows),
                values=tuple(r.test_accuracy for r in rows),
                expected=tuple(
                    r.expected_test_accuracy
                    if r.expected_test_accuracy is not None
                    else r.test_accuracy
                    for r in rows
                ),
                paper_epsilon=max(papers) if papers else None,
                models=max(len(r.weights) for r in rows),
            )
        )
    return out


@dataclass(frozen=True)
class Comparison:
    """LC (sound bound, PLD) against RS (PLD) at one target of one family."""

    family: str
    target: float
    lc: Stat
    rs: Stat

    @property
    def difference(self) -> float:
        return self.lc.mean - self.rs.mean

    @property
    def standard_error(self) -> float:
        return math.sqrt(self.lc.sd**2 / self.lc.n + self.rs.sd**2 / self.rs.n)

    @property
    def verdict(self) -> str:
        """'lc' or 'rs' when the gap exceeds twice its standard error over seeds (and
        one point of accuracy), else 'tie'."""
        margin = max(2 * self.standard_error, 0.01)
        if self.difference > margin:
            return "lc"
        if self.difference < -margin:
            return "rs"
        return "tie"


def comparisons(all_stats: list[Stat]) -> list[Comparison]:
    by_key = {
        (s.family, s.method, s.target): s
        for s in all_stats
        if s.accountant == "pld" and s.objective == "signal"
    }
    out = []
    for (family, method, target), lc in sorted(by_key.items()):
        rs = by_key.get((family, "rs", target))
        if method == "lc" and rs is not None:
            out.append(Comparison(family, target, lc, rs))
    return out


def headline(result: DemoResult) -> str:
    """One sentence on what this run's numbers show about LC against RS."""
    cmp = comparisons(stats(result))
    if not cmp:
        return "No target was released by both LC and RS, so this run compares nothing."
    seeds = min(min(c.lc.n, c.rs.n) for c in cmp)
    lc_wins = sum(c.verdict == "lc" for c in cmp)
    rs_wins = sum(c.verdict == "rs" for c in cmp)
    ties = len(cmp) - lc_wins - rs_wins
    merged = sum(c.lc.models > 1 for c in cmp)
    mean_gap = 100 * statistics.fmean(c.difference for c in cmp)
    if lc_wins and not rs_wins:
        lead = "LC was never worse than RS and sometimes better"
    elif rs_wins and not lc_wins:
        lead = "LC never beat RS"
    elif lc_wins and rs_wins:
        lead = "Neither method won everywhere"
    else:
        lead = "LC and RS were indistinguishable"
    return (
        f"{lead} under the sound LC bound: over {len(cmp)} target(s) and {seeds} seeds, "
        f"LC's released test accuracy was clearly higher than RS's expected accuracy at "
        f"{lc_wins}, clearly lower at {rs_wins} and within the seeds' noise at {ties}, and "
        f"LC merged more than one model at only {merged} of them (mean difference LC - RS "
        f"{mean_gap:+.1f} points; PLD accounting for both)."
    )
