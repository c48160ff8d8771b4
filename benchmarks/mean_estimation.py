"""Mean estimation (sections 4.1 and 8.1): the MSE / epsilon frontier of RS and LC.

    .venv/bin/python benchmarks/mean_estimation.py [--out benchmarks/out]

n = 100 samples clipped to [-1, 1]; the empirical mean has sensitivity 2/n. Two
Gaussian mechanisms release it with noise std s1 < s2. For targets between the
two models' epsilons, plan RS and LC (objective: merged noise variance) under
RDP and PLD and print the MSE of each plan (noise variance + the sampling
variance 1/n of N(0, 1) data). Writes mean_estimation.svg and .csv.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.profiles.profile import compute_profile
from service.dashboard.svg import Chart, Series, render
from service.errors import InfeasibleTarget

N = 100
SENSITIVITY = 2.0 / N
STDS = (0.02, 0.08)
DELTA = 1e-5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    parser.add_argument("--points", type=int, default=12)
    args = parser.parse_args()
    cands = []
    for k, std in enumerate(STDS):
        mech = parse_mechanism({"type": "gaussian", "sensitivity": SENSITIVITY, "noise_std": std})
        cands.append(Candidate(f"M{k + 1}", mech, compute_profile(mech)))
    eps_models = {
        (c.id, acc): c.profile.epsilon(DELTA, acc) for c in cands for acc in ("rdp", "pld")
    }
    lo = min(eps_models.values())
    hi = max(eps_models.values())
    targets = np.geomspace(lo * 1.001, hi, args.points)
    rows = []
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    print(
        f"{'target eps':>10} "
        + " ".join(f"{m.upper()}-{a.upper():<4}" for m in ("rs", "lc") for a in ("rdp", "pld"))
    )
    for target in targets:
        line = [f"{target:10.4f}"]
        for method in ("rs", "lc"):
            for acc in ("rdp", "pld"):
                try:
                    plan = make_plan(
                        cands, PlanRequestSpec(float(target), DELTA, method, acc, "noise")
                    )
                    mse = plan.objective_value + 1.0 / N
                    series.setdefault((method, acc), []).append((float(target), mse))
                    rows.append((float(target), method, acc, plan.epsilon, mse))
                    line.append(f"{mse:9.6f}")
                except InfeasibleTarget:
                    line.append(f"{'-':>9}")
        print(" ".join(line))
    for (method, acc), pts in sorted(series.items()):
        print(f"{method.upper()} {acc.upper()}: reachable from eps={pts[0][0]:.4f}")
    args.out.mkdir(parents=True, exist_ok=True)
    chart = Chart(
        title=f"Mean estimation, n={N}, delta={DELTA:g}: MSE vs target epsilon",
        x_label="target epsilon",
        y_label="MSE (noise variance + 1/n)",
        log_y=True,
        series=[
            Series(f"{m.upper()} ({a.upper()})", pts, dashed=a == "rdp")
            for (m, a), pts in sorted(series.items())
        ]
        + [
            Series(
                f"{cid} alone ({acc.upper()})",
                [(eps, STDS[int(cid[1]) - 1] ** 2 + 1 / N)],
                markers_only=True,
                color="#000000" if acc == "pld" else "#888888",
            )
            for (cid, acc), eps in sorted(eps_models.items())
        ],
    )
    (args.out / "mean_estimation.svg").write_text(render(chart))
    with (args.out / "mean_estimation.csv").open("w") as fh:
        fh.write("target_epsilon,method,accountant,achieved_epsilon,mse\n")
        for row in rows:
            fh.write(",".join(str(v) for v in row) + "\n")
    print(f"wrote {args.out / 'mean_estimation.svg'} and .csv")


if __name__ == "__main__":
    main()
