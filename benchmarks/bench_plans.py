"""Merging-accounting and planning timings (issue: RS and LC accounting and plans).

    .venv/bin/python benchmarks/bench_plans.py

Each line prints ours, the baseline timed in the same run, and their ratio.
Targets: LC-RDP, N=8, 100 orders up to 1024: <= 20 ms per distinct step
configuration; LC-PLD, N=4, T=10,000 constant: <= 1 s at 1e-4 and >= 10x
dp_accounting's mixture builder; exact RS plan over 64 models from cached
profiles: <= 5 ms.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting.lc.mixture import lc_mixture, mixture_rdp, mixture_rdp_literal
from service.accounting.lc.mixture_pld import mixture_pld
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.profiles.profile import compute_profile


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def lc_rdp(repeat: int) -> None:
    rng = np.random.default_rng(0)
    q = rng.uniform(0.002, 0.02, 8)
    a = rng.uniform(0.1, 0.6, 8)
    orders = np.geomspace(1.1, 1024, 100)
    mix = lc_mixture(q, a)
    t_ours, _ = best_of(lambda: mixture_rdp(mix, orders), repeat)
    t_lit, _ = best_of(lambda: mixture_rdp_literal(q, a, 2), 1)
    terms_3 = math.comb(3 + 255, 255)
    print(
        f"LC-RDP, N=8 ({len(mix.probs)} mixture components), {len(orders)} orders up to "
        f"{orders.max():.0f}, both directions: {t_ours * 1e3:.1f} ms per step configuration "
        f"(target <= 20 ms); literal Theorem 6.2 sum at order 2 only: {t_lit * 1e3:.0f} ms "
        f"({math.comb(2 + 255, 255)} terms; order 3 has {terms_3:,} terms); "
        f"ratio {t_lit / t_ours:.0f}x for one order against all {len(orders)}"
    )


def lc_pld(repeat: int, steps: int) -> None:
    rng = np.random.default_rng(1)
    q = rng.uniform(0.002, 0.01, 4)
    a = rng.uniform(0.2, 0.5, 4)
    mix = lc_mixture(q, a)

    def ours() -> float:
        return float(mixture_pld(mix, 1e-4).self_compose(steps).get_epsilon_for_delta(1e-5))

    def theirs() -> float:
        pld = pldlib.from_mixture_gaussian_mechanism(
            1.0, list(mix.shifts), list(mix.probs), value_discretization_interval=1e-4
        )
        return float(pld.self_compose(steps).get_epsilon_for_delta(1e-5))

    t_ours, e_ours = best_of(ours, repeat)
    t_theirs, e_theirs = best_of(theirs, 1)
    print(
        f"LC-PLD, N=4 ({len(mix.probs)} components), T={steps:,} equal steps, 1e-4: ours "
        f"{t_ours:.3f} s (target <= 1 s), eps(1e-5)={e_ours:.5f}; dp_accounting "
        f"from_mixture_gaussian_mechanism {t_theirs:.3f} s, eps={e_theirs:.5f}; "
        f"ratio {t_theirs / t_ours:.1f}x (target >= 10x)"
    )
    mix8 = lc_mixture(q[:3], a[:3])
    t_b, _ = best_of(
        lambda: pldlib.from_mixture_gaussian_mechanism(
            1.0, list(mix8.shifts), list(mix8.probs), value_discretization_interval=1e-3
        ).self_compose(1000),
        1,
    )
    t_o, _ = best_of(lambda: mixture_pld(mix8, 1e-3).self_compose(1000), repeat)
    print(
        f"LC-PLD, 8 components, 1,000 compositions, 1e-3: ours {t_o:.3f} s; dp_accounting "
        f"{t_b:.3f} s; ratio {t_b / t_o:.1f}x"
    )


def rs_plan(repeat: int) -> None:
    rng = np.random.default_rng(2)
    cands = []
    for i in range(64):
        sigma = float(rng.uniform(0.6, 4.0))
        mech = parse_mechanism(
            {
                "type": "dp_sgd",
                "sampling_rate": 0.01,
                "noise_multiplier": sigma,
                "clipping_norm": 1.0,
                "steps": 200,
                "learning_rate": 0.1,
            }
        )
        profile = compute_profile(mech)
        _ = profile.curves  # cached with the profile
        cands.append(Candidate(f"m{i}", mech, profile, {"accuracy": 0.6 + 0.3 / sigma}))
    for acc in ("rdp", "pld"):
        spec = PlanRequestSpec(1.0, 1e-5, "rs", acc, "metric", metric="accuracy")
        t, plan = best_of(lambda spec=spec: make_plan(cands, spec), repeat)
        print(
            f"RS plan, 64 models, {acc.upper()}, from cached profiles: {t * 1e3:.2f} ms "
            f"(target <= 5 ms); mixes {len(plan.weights)} models"  # type: ignore[attr-defined]
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    lc_rdp(args.repeat)
    lc_pld(args.repeat, args.steps)
    rs_plan(args.repeat)


if __name__ == "__main__":
    main()
