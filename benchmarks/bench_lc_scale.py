"""Sound LC plans at scale: N distinct DP-SGD models on one dataset.

    .venv/bin/python benchmarks/bench_lc_scale.py [--sizes 8 16 32 64] [--repeat 3]
        [--generous 4.0]

With ``--generous EPS`` it times instead, at the fixed target (EPS, 1e-5) where LC
merges many models, the ``lc``, ``auto`` and ``rs`` plans over N DP-SGD models (noise
0.8 + 0.02 i, q 0.01, 300 steps): cold (the first plan on profiles loaded fresh: no
epsilon or curve computed yet) and warm (``repeat`` more, the target moved by 1e-9).

For each N prints the in-process time of an LC plan (accountant best) from cached
profiles (median of ``repeat`` runs and the spread), the time of the baseline in the
same run (composing the N models' joint release under PLD, work any sound LC
certificate must at least match), their ratio, and the certificate beside the joint
release of its models' first T-1 steps (the floor of every LC certificate) and the
paper's per-step composition (a comparison, not a guarantee).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time

import numpy as np

from service.accounting.lc import accountant as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.profiles.profile import compute_profile


def models(n: int, q: float = 0.02, noise_step: float = 0.05) -> list[Candidate]:
    """N DP-SGD models of 300 steps, noise 0.8 + noise_step * i, with their profiles."""
    out = []
    for i in range(n):
        mech = parse_mechanism(
            {
                "type": "dp_sgd",
                "sampling_rate": q,
                "noise_multiplier": 0.8 + noise_step * i,
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
    parser.add_argument("--generous", type=float, default=None)
    args = parser.parse_args()
    if args.generous is not None:
        generous(args)
        return
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


def generous(args: argparse.Namespace) -> None:
    print("N | method | cold s | warm s median (min-max) | chosen | epsilon")
    for n in args.sizes:
        built = models(n, q=0.01, noise_step=0.02)
        frozen = pickle.dumps(built)
        for method in ("lc", "auto", "rs"):
            cands = pickle.loads(frozen)  # as a plan process holds them: nothing memoised
            spec = PlanRequestSpec(args.generous, 1e-5, method, "best", "noise")
            cold, _, _, plan = timed(lambda c=cands, s=spec: make_plan(c, s), 1)
            warm = []
            for k in range(args.repeat):
                moved = PlanRequestSpec(
                    args.generous + 1e-9 * (k + 1), 1e-5, method, "best", "noise"
                )
                warm.append(timed(lambda c=cands, s=moved: make_plan(c, s), 1)[0])
            print(
                f"{n} | {method} | {cold:.2f} | {statistics.median(warm):.3f} "
                f"({min(warm):.3f}-{max(warm):.3f}) | {plan.method} {len(plan.weights)} "  # type: ignore[attr-defined]
                f"model(s) | {plan.epsilon:.4f}",  # type: ignore[attr-defined]
                flush=True,
            )


if __name__ == "__main__":
    main()
