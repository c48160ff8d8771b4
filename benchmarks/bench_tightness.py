"""Tightness of every profile epsilon against the best independent references.

A fixed suite of mechanisms (constant DP-SGD, schedules, per-group clipping,
Gaussian queries, balanced iteration subsampling, model splitting and dropout) at deltas
from 1e-10 to 1e-3.
For each, our epsilon (``compute_profile(...).epsilon(delta)``) is compared with:

- dp_accounting's PLD, pessimistic, on a grid finer than ours (half of it or finer);
- dp_accounting's RDP accountant at the best order of its default grid;
- for BIS: the best valid RDP figure at hand (``bis_valid_reference``: the
  random-allocation package's exact remove-direction RDP, our certified exact
  add-direction RDP, each direction at its own best order) and the package's
  "combined" figure (the smallest of its methods; for k = 1 and one epoch its PLD
  decomposition into Poisson subsampling); the package's own RDP figure is printed
  beside them but is not a bound (its add-direction formula falls below the true
  divergence), and so is our RDP-only figure;
- for model splitting: the exact step RDP by quadrature, composed and converted at the
  best integer order (``tightness_splitting``; no PLD is known under subsampling).

Sound: ours >= dp_accounting's optimistic PLD on the same grid (a lower bound on
the truth up to its grid); for BIS with k = 1 and one epoch, ours >= the package's
lower bound (no floor is known otherwise); for model splitting, our step RDP >= the
quadrature's at every order checked. Tight: ours / min(references). Prints every row,
then median and worst per family and overall.

Schedules of 200, 1,000 and 3,000 distinct steps are in the schedule family: their
references compose every step with dp_accounting (about an hour for 3,000 on 2 cores);
``--max-distinct=N`` leaves out the schedules with more than N distinct steps.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/bench_tightness.py [--sample] [--family=NAME ...]
    [--max-distinct=N]
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pldlib
from dp_accounting.rdp import rdp_privacy_accountant as rdplib

from benchmarks import tightness_splitting as splitting
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile


@dataclass(frozen=True)
class Case:
    family: str
    mechanism: dict[str, Any]
    delta: float
    steps: tuple[tuple[float, float, int], ...]  # (q, sigma, count) for dp_accounting
    bis: tuple[int, int, float, int] | None = None  # (d, k, sigma, epochs)
    split: tuple[int, float, float, float, int] | None = None  # (d, sigma, shared, q, steps)


def _sgd(q: float, sigma: float, steps: int) -> dict[str, Any]:
    return {
        "type": "dp_sgd",
        "sampling_rate": q,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "steps": steps,
    }


CONSTANT = [
    (0.001, 10.0, 10),
    (0.001, 5.0, 100),
    (0.01, 30.0, 100),
    (0.01, 1.0, 1000),
    (0.01, 2.0, 500),
    (0.02, 0.8, 300),
    (0.1, 0.6, 10),
    (0.05, 1.5, 200),
    (0.5, 0.5, 1),
    (0.9, 0.3, 1),
    (1e-4, 50.0, 1),
    (0.004, 1.1, 1000),
    (0.2, 3.0, 50),
]
GAUSSIAN = [(0.3, 1), (0.2, 1), (0.5, 4), (1.0, 1), (3.0, 10), (10.0, 1), (30.0, 3), (100.0, 1)]
SCHEDULES = [
    ((0.01, 1.0, 300), (0.01, 2.0, 300)),
    ((0.005, 1.2, 200), (0.02, 1.2, 200)),
    ((0.01, 0.9, 100), (0.01, 1.1, 100), (0.01, 1.3, 100), (0.01, 1.5, 100)),
    ((0.1, 4.0, 20), (0.05, 2.0, 40)),
    ((0.002, 8.0, 50), (0.004, 6.0, 50), (0.008, 4.0, 50)),
]
#: Schedules of many distinct steps (q = 0.01, sigma drawn in [0.8, 2.0], one step each): the
#: PLD composes every distinct step (or groups them past its work limit).
MANY_DISTINCT = (200, 1000, 3000)
PER_GROUP = [((0.5, 2.0), 0.01, 500), ((1.0, 1.0, 1.0, 1.0), 0.02, 200), ((3.0, 0.9), 0.05, 100)]
BIS = [(100, 1, 1.0, 1), (200, 1, 0.8, 1), (1000, 10, 1.0, 1), (50, 5, 2.0, 3), (500, 5, 1.5, 2)]
DELTAS = (1e-10, 1e-6, 1e-5, 1e-3)


def suite() -> list[Case]:
    cases: list[Case] = []
    for q, s, n in CONSTANT:
        for d in DELTAS:
            cases.append(Case("constant", _sgd(q, s, n), d, ((q, s, n),)))
    for s, n in GAUSSIAN:
        mech = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": s, "count": n}
        for d in DELTAS:
            cases.append(Case("gaussian", mech, d, ((1.0, s, n),)))
    for segs in SCHEDULES:
        mech = {
            "type": "dp_sgd",
            "schedule": [
                {"steps": n, "sampling_rate": q, "noise_multiplier": s, "clipping_norm": 1.0}
                for q, s, n in segs
            ],
        }
        for d in (1e-10, 1e-5, 1e-3):
            cases.append(Case("schedule", mech, d, tuple(segs)))
    for n in MANY_DISTINCT:
        sigmas = (0.8 + 1.2 * np.random.default_rng(0).random(n)).tolist()
        mech = {
            "type": "dp_sgd",
            "per_step": {"sampling_rate": 0.01, "noise_multiplier": sigmas, "clipping_norm": 1.0},
        }
        for d in (1e-10, 1e-5, 1e-3):
            cases.append(Case("schedule", mech, d, tuple((0.01, s, 1) for s in sigmas)))
    for sigmas, q, n in PER_GROUP:
        groups = [{"clipping_norm": 1.0 + i, "noise_multiplier": s} for i, s in enumerate(sigmas)]
        eff = 1.0 / math.sqrt(sum(s**-2 for s in sigmas))
        mech = {"type": "dp_sgd", "sampling_rate": q, "steps": n, "groups": groups}
        for d in (1e-10, 1e-5, 1e-3):
            cases.append(Case("per-group", mech, d, ((q, eff, n),)))
    for d_, k, s, e in BIS:
        mech = {
            "type": "balanced_iteration_subsampling",
            "iterations": d_,
            "participations": k,
            "noise_multiplier": s,
            "clipping_norm": 1.0,
            "epochs": e,
        }
        for d in (1e-6, 1e-5):
            cases.append(Case("bis", mech, d, (), (d_, k, s, e)))
    for split in splitting.SPLITTING:
        for d in (1e-6, 1e-5):
            cases.append(Case("splitting", splitting.mechanism(*split), d, (), split=split))
    return cases


def _rdp_accountant(steps: tuple[tuple[float, float, int], ...]) -> rdplib.RdpAccountant:
    acc = rdplib.RdpAccountant()
    for q, s, n in steps:
        event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(s)
        if q < 1:
            event = dp_accounting.PoissonSampledDpEvent(q, event)
        acc.compose(dp_accounting.SelfComposedDpEvent(event, n))
    return acc


def rdp_reference(steps: tuple[tuple[float, float, int], ...], delta: float) -> float:
    key = ("rdp", steps)
    if key not in _CACHE:
        _CACHE[key] = _rdp_accountant(steps)
    return float(_CACHE[key].get_epsilon(delta))


def _step_pld(q: float, s: float, n: int, width: float, pessimistic: bool):
    if q >= 1:
        return pldlib.from_gaussian_mechanism(
            s / math.sqrt(n),
            value_discretization_interval=width,
            pessimistic_estimate=pessimistic,
            use_connect_dots=pessimistic,
        )
    pld = pldlib.from_gaussian_mechanism(
        s,
        sampling_prob=q,
        value_discretization_interval=width,
        pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )
    return pld.self_compose(n) if n > 1 else pld


def pld_reference(
    steps: tuple[tuple[float, float, int], ...], delta: float, width: float, pessimistic: bool
) -> float:
    """dp_accounting's PLD of every step, composed pairwise (a balanced tree: the same
    composition as one by one, with less work), cached per schedule and grid."""
    key = ("pld", steps, width, pessimistic)
    if key not in _CACHE:
        stack: list[tuple[int, Any]] = []  # (level, PLD): a binary counter of partial sums
        for q, s, n in steps:
            level, pld = 0, _step_pld(q, s, n, width, pessimistic)
            while stack and stack[-1][0] == level:
                pld = stack.pop()[1].compose(pld)
                level += 1
            stack.append((level, pld))
        total = stack.pop()[1]
        while stack:
            total = stack.pop()[1].compose(total)
        _CACHE[key] = total
    return float(_CACHE[key].get_epsilon_for_delta(delta))


#: Whether the BIS reference includes the package's "combined" figure (about a minute
#: for the suite; the sample test leaves it out).
PACKAGE_COMBINED = True

#: References and profiles already computed in this run (a schedule is queried at several deltas).
_CACHE: dict[Any, Any] = {}


def _profile(mechanism: dict[str, Any]) -> tuple[Any, float]:
    key = ("profile", json.dumps(mechanism, sort_keys=True))
    if key not in _CACHE:
        t0 = time.perf_counter()
        _CACHE[key] = (compute_profile(parse_mechanism(mechanism)), time.perf_counter() - t0)
    return _CACHE[key]


#: The package's "direct" method needs its orders (those of its remove-direction RDP).
PACKAGE_DIRECT_ORDERS = list(range(2, 41))


def bis_package_combined(d: int, k: int, sigma: float, epochs: int, delta: float) -> float:
    """The random-allocation package's "combined" epsilon (both directions): the smallest
    of its methods, for k = 1 and one epoch including its PLD decomposition into Poisson
    subsampling (Feldman and Shenfeld 2025). Cached per mechanism and delta."""
    from random_allocation.comparisons.definitions import Direction, PrivacyParams, SchemeConfig
    from random_allocation.random_allocation_scheme.combined import allocation_epsilon_combined

    key = ("combined", d, k, sigma, epochs, delta)
    if key not in _CACHE:
        params = PrivacyParams(
            sigma=sigma, num_steps=d, num_selected=k, num_epochs=epochs, delta=delta
        )
        config = SchemeConfig(allocation_direct_alpha_orders=PACKAGE_DIRECT_ORDERS)
        _CACHE[key] = float(allocation_epsilon_combined(params, config, Direction.BOTH))
    return _CACHE[key]


def bis_package_rdp(d: int, k: int, sigma: float, epochs: int, delta: float) -> float:
    """The random-allocation package's RDP figure (both directions). NOT a bound: its
    add-direction formula falls below the true D_alpha(Q||P) (tests/unit/test_bis_allocation.py)."""
    from random_allocation.comparisons.definitions import Direction, PrivacyParams, SchemeConfig
    from random_allocation.random_allocation_scheme.RDP_DCO import allocation_epsilon_RDP_DCO

    params = PrivacyParams(sigma=sigma, num_steps=d, num_selected=k, num_epochs=epochs, delta=delta)
    return float(allocation_epsilon_RDP_DCO(params, SchemeConfig(), Direction.BOTH))


#: Orders of the valid BIS reference: exact remove-direction RDP (the package's partition
#: sum) at 2..40, its eq. (3) form on its own grid beyond.
BIS_EXACT_ORDERS = np.arange(2, 41, dtype=np.float64)
BIS_MORE_ORDERS = np.concatenate([np.arange(41, 202), np.geomspace(202, 10_000, 50)])


def _best_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    eps = rdp + np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
    return float(np.min(np.maximum(eps, 0.0)))


def bis_valid_reference(d: int, k: int, sigma: float, epochs: int, delta: float) -> float:
    """The best valid RDP figure at hand: each direction converted at its own best order,
    then the larger epsilon (a guarantee for both neighbouring directions).

    Remove (D_alpha(P||Q)): the random-allocation package's exact partition sum
    (allocation_RDP_remove; for k > 1 its own reduction, k compositions of one
    participation in d / k steps, k dividing d), with its eq. (3) form above order 40.
    Add (D_alpha(Q||P)): the package has no valid tight formula (its RDP one falls below
    quadrature; its 'direct' one is AM-GM), so ours: the certified exact divergence of
    one participation, over the k blocks (service.accounting.bis.rdp), min with AM-GM.
    """
    from random_allocation.random_allocation_scheme.direct import allocation_RDP_remove
    from random_allocation.random_allocation_scheme.RDP_DCO import allocation_RDP_DCO_remove

    from service.accounting.bis import rdp as bis

    if d % k:
        raise ValueError(f"the package's reduction needs k | d, got d={d}, k={k}")
    per = d // k
    exact = np.array(
        [
            k * allocation_RDP_remove(alpha=int(a), sigma=sigma, num_steps=per)
            for a in BIS_EXACT_ORDERS
        ]
    )
    dco = np.array([allocation_RDP_DCO_remove(sigma, d, k, float(a)) for a in BIS_EXACT_ORDERS])
    remove = np.concatenate(
        [
            np.minimum(exact, dco),
            [allocation_RDP_DCO_remove(sigma, d, k, float(a)) for a in BIS_MORE_ORDERS],
        ]
    )
    orders = np.concatenate([BIS_EXACT_ORDERS, BIS_MORE_ORDERS])
    add = np.minimum(
        bis.reverse_rdp_blocks(d, k, sigma, orders), bis.reverse_rdp(d, k, sigma, orders)
    )
    return max(
        _best_epsilon(orders, epochs * remove, delta), _best_epsilon(orders, epochs * add, delta)
    )


def bis_lower_bound(d: int, k: int, sigma: float, epochs: int, delta: float) -> float:
    """The package's lower bound on epsilon (k = 1, one epoch only), else 0."""
    from random_allocation.comparisons.definitions import PrivacyParams, SchemeConfig
    from random_allocation.random_allocation_scheme.lower_bound import (
        allocation_epsilon_lower_bound,
    )

    if k > 1 or epochs > 1:
        return 0.0
    params = PrivacyParams(sigma=sigma, num_steps=d, num_selected=1, num_epochs=1, delta=delta)
    return float(allocation_epsilon_lower_bound(params, SchemeConfig()))


def measure(case: Case) -> dict[str, Any]:
    t0 = time.perf_counter()
    profile, built = _profile(case.mechanism)
    ours = profile.epsilon(case.delta)
    seconds = built + time.perf_counter() - t0
    our_width = float(profile.parameters.get("discretization", 1e-4))
    row: dict[str, Any] = {"family": case.family, "delta": case.delta, "ours": ours}
    if case.bis is not None:
        refs = {"valid RDP reference": bis_valid_reference(*case.bis, case.delta)}
        if PACKAGE_COMBINED:
            refs["package combined"] = bis_package_combined(*case.bis, case.delta)
        row["package"] = bis_package_rdp(*case.bis, case.delta)
        row["ours_rdp"] = profile.epsilon(case.delta, "rdp")
        row["combined"] = refs.get("package combined", math.nan)
        floor = bis_lower_bound(*case.bis, case.delta)
    elif case.split is not None:
        refs = {"quadrature RDP": splitting.reference(*case.split, case.delta)}
        # no PLD, so no floor on epsilon: sound is the step RDP against the quadrature
        floor = 0.0 if splitting.sound(*case.split[:4]) else math.inf
    else:
        rdp = rdp_reference(case.steps, case.delta)
        # finer than ours: half our grid, and at most 1/1000 of the epsilon
        width = min(our_width / 2, max(our_width / 20, ours / 1000))
        refs = {
            "dp_accounting PLD": pld_reference(case.steps, case.delta, width, True),
            "dp_accounting RDP": rdp,
        }
        floor = pld_reference(case.steps, case.delta, width, False)
    best = min(refs, key=lambda k: refs[k])
    row.update(
        reference=best,
        reference_eps=refs[best],
        ratio=ours / refs[best] if refs[best] > 0 else (1.0 if ours == 0 else math.inf),
        sound=ours >= floor,
        floor=floor,
        seconds=seconds,
    )
    return row


def summary(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    families = sorted({r["family"] for r in rows})
    for name in [*families, "all"]:
        sel = [r for r in rows if name in ("all", r["family"])]
        ratios = [r["ratio"] for r in sel]
        worst = max(sel, key=lambda r: r["ratio"])
        out.append(
            f"{name:10s} n={len(sel):3d} median {statistics.median(ratios):.5f} "
            f"worst {worst['ratio']:.5f} (eps {worst['ours']:.4g} at delta {worst['delta']:g}) "
            f"sound {all(r['sound'] for r in sel)}"
        )
    return out


def main(argv: list[str]) -> None:
    cases = suite()
    if "--sample" in argv:
        cases = cases[::10]
    families = [a.split("=", 1)[1] for a in argv if a.startswith("--family=")]
    if families:
        cases = [c for c in cases if c.family in families]
    most = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--max-distinct=")]
    if most:
        cases = [c for c in cases if len(c.steps) <= most[0]]
    rows = []
    for case in cases:
        row = measure(case)
        rows.append(row)
        distinct = f" ({len(case.steps)} distinct)" if len(case.steps) > 4 else ""
        print(
            f"{row['family']:10s} delta {row['delta']:<7g} ours {row['ours']:<12.6g} "
            f"{row['reference']:22s} {row['reference_eps']:<12.6g} ratio {row['ratio']:.5f} "
            f"sound {row['sound']}{distinct} ours {row['seconds']:.1f} s"
            + (
                f" (our RDP {row['ours_rdp']:.6g}; package combined {row['combined']:.6g}; "
                f"package RDP, not a bound: "
                f"{row['package']:.6g}; lower bound {row['floor']:.6g})"
                if "package" in row
                else ""
            ),
            flush=True,
        )
    print(f"{len(rows)} mechanisms")
    for line in summary(rows):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
