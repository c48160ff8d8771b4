"""Least-noise LC weights for fixed Gaussian queries with unequal sensitivities: the
plan's merged noise against an independent optimum, its epsilon against the exact
Gaussian curve (Balle and Wang 2018).

The oracle solves min sum lam_i^2 s_i^2 on the 2- or 3-simplex subject to
sum lam_i Delta_i <= m sqrt(sum lam_i^2 s_i^2) by brute force: a dense grid over the
first weight (refined around its best point) and, for each, the exact minimum along
the remaining segment (objective and constraint are quadratics there, so the minimum
is at an end, at the objective's vertex or at a root of the constraint)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.planning.gaussian_weights import optimal_gaussian_weights
from service.accounting.profiles.profile import compute_profile
from tests.oracles import gaussian_delta


def _mu_max(epsilon: float, delta: float) -> float:
    return optimize.brentq(lambda mu: gaussian_delta(mu, epsilon) - delta, 1e-6, 100, xtol=1e-15)


def _exact_epsilon(mu: float, delta: float) -> float:
    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    return optimize.brentq(lambda e: gaussian_delta(mu, e) - delta, 0.0, 700.0, xtol=1e-13)


def _segment_min(start, direction, sens, std, m):
    """Exact min of S on start + s direction, s in [0, 1], with t <= m sqrt(S)."""
    var = std**2
    a, b, c = direction**2 @ var, 2 * (start * direction) @ var, start**2 @ var
    p, r = direction @ sens, start @ sens
    ga, gb, gc = m * m * a - p * p, m * m * b - 2 * p * r, m * m * c - r * r
    points = [0.0, 1.0] + ([-b / (2 * a)] if a > 0 else [])
    disc = gb * gb - 4 * ga * gc
    if abs(ga) > 1e-300 and disc >= 0:
        points += [(-gb + sign * math.sqrt(disc)) / (2 * ga) for sign in (1, -1)]
    best = math.inf
    for s in points:
        if 0 <= s <= 1:
            value = a * s * s + b * s + c
            if ga * s * s + gb * s + gc >= -1e-12 * m * m * value:
                best = min(best, value)
    return best


def oracle(sens: np.ndarray, std: np.ndarray, m: float) -> float:
    if sens.shape[0] == 2:
        return _segment_min(np.array([0.0, 1.0]), np.array([1.0, -1.0]), sens, std, m)

    def f(w: float) -> float:
        start, direction = np.array([w, 0.0, 1 - w]), np.array([0.0, 1 - w, w - 1])
        return _segment_min(start, direction, sens, std, m)

    grid = np.linspace(0.0, 1.0, 801)
    values = [f(w) for w in grid]
    best = min(values)
    k = int(np.argmin(values))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, 800)]
    for _ in range(3):
        sub = np.linspace(lo, hi, 201)
        sv = [f(w) for w in sub]
        j = int(np.argmin(sv))
        best = min(best, sv[j])
        lo, hi = sub[max(j - 1, 0)], sub[min(j + 1, 200)]
    return best


def _instance(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    n = int(rng.integers(2, 4))
    sens, std = rng.uniform(0.01, 0.05, n), rng.uniform(0.005, 0.07, n)
    mus = sens / std
    return sens, std, float(rng.uniform(0.9 * mus.min(), mus.max()))


def test_the_solver_meets_the_brute_force_optimum() -> None:
    rng = np.random.default_rng(7)
    for _ in range(120):
        sens, std, m = _instance(rng)
        lam = optimal_gaussian_weights(sens, std, m)
        best = oracle(sens, std, m)
        if not math.isfinite(best):
            assert lam is None
            continue
        assert lam is not None and np.all(lam >= 0) and lam.sum() == pytest.approx(1.0)
        value = float(lam**2 @ std**2)
        assert float(lam @ sens) <= m * math.sqrt(value) * (1 + 1e-9)
        assert best * (1 - 1e-6) <= value <= best * (1 + 1e-6)


def test_equal_sensitivities_reach_the_least_noise_the_target_allows() -> None:
    """Equal shifts d: every feasible point has S >= d^2 / m^2; the optimum reaches it."""
    sens, std = np.array([0.02, 0.02, 0.02]), np.array([0.01, 0.03, 0.05])
    m = 0.02 / 0.02
    lam = optimal_gaussian_weights(sens, std, m)
    assert lam is not None
    assert float(lam**2 @ std**2) == pytest.approx((0.02 / m) ** 2, rel=1e-9)


def _plan(sens, std, epsilon: float, delta: float, count: int = 1, accountant: str = "pld"):
    cands = []
    for i, (d, s) in enumerate(zip(sens, std, strict=True)):
        mech = {"type": "gaussian", "sensitivity": float(d), "noise_std": float(s)}
        if count > 1:
            mech |= {"count": count, "adaptive": False}
        m = parse_mechanism(mech)
        cands.append(Candidate(f"g{i}", m, compute_profile(m), {}, f"g{i}", None, "s"))
    plan = make_plan(cands, PlanRequestSpec(epsilon, delta, "lc", accountant, "noise"))  # type: ignore[arg-type]
    lam = np.array([plan.weights.get(f"g{i}", 0.0) for i in range(len(sens))])
    return plan, lam


def _check_plan(sens, std, epsilon: float, delta: float, count: int = 1, accountant="pld"):
    plan, lam = _plan(sens, std, epsilon, delta, count, accountant)
    best = count * oracle(sens, std, _mu_max(epsilon, delta) / math.sqrt(count))
    assert plan.objective_value is not None
    assert plan.objective_value <= best * 1.001
    mu = math.sqrt(count) * float(lam @ sens) / math.sqrt(float(lam**2 @ std**2))
    assert _exact_epsilon(mu, delta) <= plan.epsilon <= epsilon


LOCAL_OPTIMA = [  # (sensitivities, noise stds, delta, epsilon, how far a local search stopped)
    (
        [0.03885953360776327, 0.03101417289902904, 0.022409675022358227],
        [0.03657929832406629, 0.06281670923268502, 0.06571282853715624],
        2.6988626732963807e-07,
        3.19363378199317,
    ),  # 17.8% above the optimum, at epsilon 2.88 < target
    (
        [0.04996704460260286, 0.03609476446351951, 0.01938040806679296],
        [0.03327159089463423, 0.0683221025618516, 0.06334904452705567],
        2.381903433409525e-05,
        2.516915461060051,
    ),  # 5.5% above
    (
        [0.02269111361106863, 0.026083381077510633, 0.01003679156443463],
        [0.03231199475505348, 0.046043346898598854, 0.06577247112213228],
        4.9511529084600846e-05,
        0.861807770359499,
    ),  # 1.9% above
]


@pytest.mark.parametrize(("sens", "std", "delta", "epsilon"), LOCAL_OPTIMA)
def test_a_plan_leaves_the_local_optima_a_local_search_stops_in(sens, std, delta, epsilon) -> None:
    _check_plan(np.array(sens), np.array(std), epsilon, delta)


def test_plans_on_random_instances_are_optimal_and_never_below_the_exact_epsilon() -> None:
    rng = np.random.default_rng(11)
    done = 0
    while done < 4:
        sens, std, _ = _instance(rng)
        delta = float(10 ** rng.uniform(-8, -4))
        mus = sens / std
        epsilon = _exact_epsilon(float(rng.uniform(mus.min(), mus.max())), delta)
        if epsilon < 0.05:
            continue
        _check_plan(sens, std, epsilon, delta, accountant="best" if done % 2 else "pld")
        done += 1


def test_equal_query_counts_use_the_same_optimum() -> None:
    sens, std = np.array([0.03, 0.01]), np.array([0.05, 0.04])
    _check_plan(sens, std, _exact_epsilon(0.8, 1e-6), 1e-6, count=3)
