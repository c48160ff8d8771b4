"""Sound LC plans at scale: N distinct DP-SGD models on one dataset.

    .venv/bin/python benchmarks/bench_lc_scale.py [--sizes 8 16 32 64] [--repeat 3]

For each N prints the in-process time of an LC plan (accountant best) from cached
profiles (median of ``repeat`` runs and the spread), the time of the baseline in the
same run (composing the N models' joint release under PLD, work any sound LC
certificate must at least match), their ratio, and the certificate beside the joint
release of its models' first T-1 steps (the floor of every LC certificate) and the
paper's per-step composition (a comparison, not a guarantee).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from service.accounting import linear_combination as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.profiles import compute_profile


def models(n: int) -> list[Candidate]:
    out = []
    for i in range(n):
        mech = parse_mechanism(
            {
                "type": "dp_sgd",
                "sampling_rate": 0.02,
                "noise_multiplier": 0.8 + 0.05 * i,
                "clipping_norm": 1.0,
                "steps": 300,
                "learning_rate": 0.1,
            }
        )
        profile = compute_profile(mech)
        released = lc.released_profile(lc.lc_input(mech), profile)
        out.append(Candidate(f"m{i}", mech, profile, {}, f"r{i}", None, "s", released))
    return out


def timed(fn, repeat: int) -> tuple[float, float, float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times), out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("N | LC plan median (min-max) | joint PLD of N models | ratio | eps | floor | paper")
    for n in args.sizes:
        cands = models(n)
        target = float(np.median([c.profile.epsilon(1e-5) for c in cands])) * 1.5
        spec = PlanRequestSpec(target, 1e-5, "lc", "best", "noise")
        med, lo, hi, plan = timed(lambda c=cands, s=spec: make_plan(c, s), args.repeat)

        def joint(c: list[Candidate] = cands) -> float:
            return lc.joint_epsilon([x.profile for x in c], 1e-5, "pld")

        base, _, _, _ = timed(joint, args.repeat)
        chosen = [c for c in cands if c.id in plan.weights]  # type: ignore[attr-defined]
        floor = lc.joint_epsilon(
            [c.released_profile for c in chosen if c.released_profile], 1e-5, "pld"
        )
        print(
            f"{n} | {med:.3f} s ({lo:.3f}-{hi:.3f}) | {base:.3f} s | {med / base:.2f} | "
            f"{plan.epsilon:.4f} ({len(chosen)} models, {plan.accountant}) | "  # type: ignore[attr-defined]
            f"{floor:.4f} | {plan.paper_epsilon}"  # type: ignore[attr-defined]
        )


if __name__ == "__main__":
    main()
