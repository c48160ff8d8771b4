"""Per-model profile timings (issue: per-model privacy profiles).

    .venv/bin/python benchmarks/bench_profiles.py

Prints, for each case, our time and dp_accounting's time on the same input in
the same run, and their ratio. Targets: RDP of a 10,000-distinct-step
schedule <= 2 s; PLD of a typical 3-segment run <= 3 s at discretization 1e-4.
The whole profile of the 10,000-distinct-step schedule is timed against
dp_accounting's PLD accountant on its first steps, projected (composing all
10,000 distinct steps with it takes hours).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

from service.accounting.conversions import ORDERS
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import _dp_sgd_groups, compute_profile
from service.accounting.rdp.gaussian import subsampled_gaussian_rdp


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def rdp_10k(repeat: int, baseline_steps: int) -> None:
    rng = np.random.default_rng(0)
    sigmas = (0.8 + 1.2 * rng.random(10_000)).tolist()
    mech = parse_mechanism(
        {
            "type": "dp_sgd",
            "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
        }
    )
    q, sigma, counts = _dp_sgd_groups(mech)

    def ours() -> np.ndarray:
        return (subsampled_gaussian_rdp(q, sigma, ORDERS) * counts[:, None]).sum(axis=0)

    t_ours, rdp = best_of(ours, repeat)

    def theirs() -> float:
        acc = dp_rdp.RdpAccountant(orders=list(ORDERS))
        for s in sigmas[:baseline_steps]:
            acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(s)))
        return float(acc.get_epsilon(1e-5))

    t_theirs, _ = best_of(theirs, 1)
    per_step_theirs = t_theirs / baseline_steps
    print(
        f"RDP, 10,000 distinct steps, {len(ORDERS)} orders: ours {t_ours:.3f} s "
        f"(target <= 2 s); dp_accounting {per_step_theirs * 1e3:.2f} ms/step over "
        f"{baseline_steps} steps = {per_step_theirs * 10_000:.1f} s projected for 10,000; "
        f"ratio {per_step_theirs * 10_000 / t_ours:.1f}x"
    )
    assert np.all(np.isfinite(rdp))


def pld_3_segments(repeat: int) -> None:
    schedule = [
        {"steps": 300, "sampling_rate": 0.004, "noise_multiplier": 1.2, "clipping_norm": 1.0},
        {"steps": 300, "sampling_rate": 0.004, "noise_multiplier": 1.0, "clipping_norm": 1.0},
        {"steps": 105, "sampling_rate": 0.008, "noise_multiplier": 0.8, "clipping_norm": 1.0},
    ]
    mech = parse_mechanism({"type": "dp_sgd", "schedule": schedule})
    t_ours, profile = best_of(lambda: compute_profile(mech, discretization=1e-4), repeat)

    def theirs() -> float:
        acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        for seg in schedule:
            event = dp_accounting.PoissonSampledDpEvent(
                seg["sampling_rate"], dp_accounting.GaussianDpEvent(seg["noise_multiplier"])
            )
            acc.compose(event, seg["steps"])
        return float(acc.get_epsilon(1e-5))

    t_theirs, eps_theirs = best_of(theirs, repeat)
    eps_ours = profile.epsilon(1e-5, "pld")  # type: ignore[attr-defined]
    print(
        f"PLD + RDP profile, 3 segments (705 steps), 1e-4: ours {t_ours:.3f} s (target <= 3 s), "
        f"eps(1e-5)={eps_ours:.5f}; dp_accounting PLDAccountant alone {t_theirs:.3f} s, "
        f"eps={eps_theirs:.5f}; ratio {t_theirs / t_ours:.2f}x"
    )


def profile_10k(baseline_steps: int) -> None:
    """The whole profile (RDP and PLD) of the 10,000-distinct-step schedule of ``rdp_10k``."""
    rng = np.random.default_rng(0)
    sigmas = (0.8 + 1.2 * rng.random(10_000)).tolist()
    mech = parse_mechanism(
        {
            "type": "dp_sgd",
            "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
        }
    )
    t_ours, profile = best_of(lambda: compute_profile(mech, discretization=1e-4), 1)
    eps = [profile.epsilon(d, "pld") for d in (1e-10, 1e-5, 1e-3)]  # type: ignore[attr-defined]
    grouped = [n for n in profile.notes if "grouped" in n]  # type: ignore[attr-defined]

    def theirs() -> float:
        acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        for s in sigmas[:baseline_steps]:
            acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(s)))
        return float(acc.get_epsilon(1e-5))

    t_theirs, _ = best_of(theirs, 1)
    projected = t_theirs / baseline_steps * 10_000
    print(
        f"Full profile (RDP + PLD at 1e-4), 10,000 distinct steps: ours {t_ours:.1f} s, "
        f"PLD eps(1e-10, 1e-5, 1e-3) = {', '.join(f'{e:.5f}' for e in eps)}; "
        f"{grouped[0] if grouped else 'every distinct step composed'}; dp_accounting "
        f"PLDAccountant {t_theirs / baseline_steps:.2f} s/step over {baseline_steps} distinct "
        f"steps = {projected:.0f} s projected for 10,000; ratio {projected / t_ours:.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-steps", type=int, default=200)
    parser.add_argument("--pld-baseline-steps", type=int, default=30)
    args = parser.parse_args()
    rdp_10k(args.repeat, args.baseline_steps)
    pld_3_segments(args.repeat)
    profile_10k(args.pld_baseline_steps)


if __name__ == "__main__":
    main()
