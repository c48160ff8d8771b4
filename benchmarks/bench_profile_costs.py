"""What a profile costs, by mechanism family, up to the largest values the schema accepts.

For each case: the cost estimate checked before any work (``cost.refusal``: refused or
not; the RDP evaluations it counts), and the measured wall time of ``compute_profile``
in a child process killed at ``--cap`` seconds (the service runs profiles the same
way, within RETARGET_PROFILE_BUDGET_S). A case the estimate lets through must finish
within the budget; the table says which did, and how long each took.

Usage: .venv/bin/python benchmarks/bench_profile_costs.py [--cap SECONDS] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from typing import Any

BIG = 10**9


def _per_step(n: int) -> dict[str, Any]:
    sigmas = [1.0 + i / (10 * n) for i in range(n)]
    return {
        "type": "dp_sgd",
        "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
    }


def _bis(d: int, k: int, sigma: float, epochs: int = 1) -> dict[str, Any]:
    return {
        "type": "balanced_iteration_subsampling",
        "iterations": d,
        "participations": k,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "epochs": epochs,
    }


def _tree(depth: int) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": "GaussianDpEvent", "noise_multiplier": 1.0}
    for _ in range(depth):
        event = {
            "kind": "ComposedDpEvent",
            "events": [
                {"kind": "PoissonSampledDpEvent", "sampling_probability": 0.01, "event": event},
                {"kind": "LaplaceDpEvent", "noise_multiplier": 3.0},
            ],
        }
    return {
        "type": "dp_event",
        "event": {"kind": "SelfComposedDpEvent", "count": 1000, "event": event},
    }


def cases(quick: bool) -> list[tuple[str, str, dict[str, Any]]]:
    sgd = {"type": "dp_sgd", "sampling_rate": 0.01, "noise_multiplier": 1.0, "clipping_norm": 1.0}
    out = [
        ("dp_sgd constant", "1,000 steps", {**sgd, "steps": 1000}),
        ("dp_sgd constant", "1e9 steps (largest)", {**sgd, "steps": BIG}),
        ("dp_sgd constant", "q = 1, 1e9 steps", {**sgd, "sampling_rate": 1.0, "steps": BIG}),
        ("dp_sgd per_step", "100 distinct", _per_step(100)),
        ("dp_sgd per_step", "1,000 distinct", _per_step(1_000)),
        (
            "gaussian",
            "count 1e9 (largest)",
            {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": 1.0, "count": BIG},
        ),
        ("bis", "d 1,000, k 100", _bis(1_000, 100, 3.0)),
        ("bis", "d 1e6, k 1e5 (review)", _bis(10**6, 10**5, 3.0)),
        ("bis", "d 1e9, k 1", _bis(BIG, 1, 3.0)),
        ("bis", "d = k = 1e9", _bis(BIG, BIG, 3.0)),
        ("bis", "d 1e9, k 5e8, sigma 0.1", _bis(BIG, BIG // 2, 0.1)),
        ("bis", "d 1,000, epochs 1e9", _bis(1_000, 1, 100.0, BIG)),
        (
            "rdp_curve",
            "2 orders",
            {"type": "rdp_curve", "orders": [2.0, 8.0], "epsilons": [0.1, 0.5]},
        ),
        ("epsilon_delta", "(1, 1e-6)", {"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-6}),
        ("dp_event", "tree of depth 3", _tree(3)),
        ("dp_event", "tree of depth 6", _tree(6)),
    ]
    if not quick:
        out += [
            ("dp_sgd per_step", "10,000 distinct", _per_step(10_000)),
            ("dp_sgd per_step", "100,000 distinct (largest)", _per_step(100_000)),
        ]
    return out


def _child(mechanism: dict[str, Any], out: Any) -> None:
    from service.accounting.mechanisms import parse_mechanism
    from service.accounting.profiles.profile import compute_profile

    start = time.perf_counter()
    profile = compute_profile(parse_mechanism(mechanism))
    eps = profile.epsilon(1e-5, "best")
    out.send((time.perf_counter() - start, eps))


def measure(mechanism: dict[str, Any], cap: float) -> tuple[float | None, float | None]:
    """(seconds, epsilon at 1e-5) of one profile, or (None, None) past ``cap``."""
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(mechanism, theirs))
    proc.start()
    ready = mine.poll(cap)
    result = mine.recv() if ready else (None, None)
    if proc.is_alive():
        proc.kill()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", type=float, default=600.0, help="kill a case after this")
    parser.add_argument("--quick", action="store_true", help="leave out the largest schedules")
    args = parser.parse_args()
    from service.accounting.conversions import ORDERS
    from service.accounting.cost import CostLimits, refusal
    from service.accounting.mechanisms import DPSGD, parse_mechanism

    print(f"load average {os.getloadavg()[0]:.1f}; cap {args.cap:g} s")
    print(f"{'family':18} {'case':28} {'estimate':>30} {'seconds':>9} {'epsilon':>12}")
    rows = []
    for family, label, mech in cases(args.quick):
        parsed = parse_mechanism(mech)
        reason = refusal(parsed, CostLimits())
        distinct = len(parsed.segments()) if isinstance(parsed, DPSGD) else 1
        estimate = "refused" if reason else f"{ORDERS.shape[0] * distinct} RDP evaluations"
        seconds, eps = (None, None) if reason else measure(mech, args.cap)
        shown = f"{seconds:9.2f}" if seconds is not None else ("      -" if reason else " > cap")
        print(
            f"{family:18} {label:28} {estimate:>30} {shown:>9} "
            f"{eps if eps is not None else '-':>12}",
            flush=True,
        )
        rows.append(
            {"family": family, "case": label, "refused": reason, "seconds": seconds, "epsilon": eps}
        )
    over = [r for r in rows if not r["refused"] and r["seconds"] is None]
    print(json.dumps({"cases": len(rows), "over_cap": [r["case"] for r in over]}))


if __name__ == "__main__":
    main()
