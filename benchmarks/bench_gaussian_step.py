"""One Poisson-subsampled Gaussian step's PLD: ours (on arrays) against dp_accounting's.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_gaussian_step.py [--repeat=N]

For each (sigma, q) at the default grid (1e-4), the median and the spread (min-max) of N
builds of ``gaussian_step_pld`` and of dp_accounting's ``from_gaussian_mechanism`` in
the same run, their ratio, and whether the two PMFs are the same (they must be: the
service's PMF is the package's, built on arrays).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting.pld.gaussian import gaussian_step_pld

CASES = [(0.8, 0.01), (1.0, 0.004), (1.5, 0.01), (0.6, 0.05), (2.0, 0.2)]
WIDTH = 1e-4


def timed(fn: Callable[[], object], repeat: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return times, out


def same(a: pldlib.PrivacyLossDistribution, b: pldlib.PrivacyLossDistribution) -> bool:
    for x, y in ((a._pmf_remove, b._pmf_remove), (a._pmf_add, b._pmf_add)):
        x, y = x.to_dense_pmf(), y.to_dense_pmf()
        if x._lower_loss != y._lower_loss or not np.array_equal(x._probs, y._probs):
            return False
    return True


def main(argv: list[str]) -> None:
    repeat = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--repeat=")), 5)
    print(
        f"{'sigma':>5} {'q':>6} {'ours median (min-max)':>26} {'package median (min-max)':>28}"
        " ratio same"
    )
    for sigma, q in CASES:
        ours_t, ours = timed(lambda s=sigma, r=q: gaussian_step_pld(s, r, WIDTH), repeat)
        theirs_t, theirs = timed(
            lambda s=sigma, r=q: pldlib.from_gaussian_mechanism(
                standard_deviation=s,
                sampling_prob=r,
                value_discretization_interval=WIDTH,
                pessimistic_estimate=True,
            ),
            repeat,
        )
        mo, mt = statistics.median(ours_t), statistics.median(theirs_t)
        print(
            f"{sigma:5.2f} {q:6.3f} {mo:8.4f} s ({min(ours_t):.4f}-{max(ours_t):.4f})"
            f" {mt:10.4f} s ({min(theirs_t):.4f}-{max(theirs_t):.4f})"
            f" {mt / mo:5.1f}x {same(ours, theirs)}",  # type: ignore[arg-type]
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
