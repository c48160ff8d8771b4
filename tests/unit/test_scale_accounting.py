"""Accounting that scales with the number of models, checked against independent oracles.

The merged LC step of N runs is a mixture whose shift is a sum of N independent
two-point variables: with runs in a few groups of equal (q, a) that distribution is a
product of binomials (scipy.stats), and the mixture's hockey-stick divergence is an
adaptive quadrature of (P - e^eps Q)_+ (scipy.integrate). The joint release of k runs
of one DP-SGD mechanism is dp_accounting's PLD of the run with k times the steps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pldlib
from scipy import integrate, optimize, stats

from service.accounting.joint_release import grouped, joint_release_epsilon
from service.accounting.lc import accountant as lc
from service.accounting.lc.merged_step import merged_step_mixture
from service.accounting.lc.mixture import mixture_rdp
from service.accounting.lc.mixture_pld import mixture_pld
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import PlanRequestSpec, make_plan
from service.accounting.planning.types import Candidate
from service.accounting.profiles.profile import compute_profile
from tests.helpers import sgd

# ---- oracle: the merged step of groups of equal runs, by quadrature ----------------------


def binomial_groups(groups: list[tuple[int, float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(weights, shifts) of sum_g a_g Binomial(n_g, q_g), from scipy's binomial pmf."""
    weights, shifts = np.ones(1), np.zeros(1)
    for n, q, a in groups:
        k = np.arange(n + 1)
        weights = np.multiply.outer(weights, stats.binom.pmf(k, n, q)).ravel()
        shifts = np.add.outer(shifts, a * k).ravel()
    return weights, shifts


def oracle_delta(weights: np.ndarray, shifts: np.ndarray, eps: float, remove: bool) -> float:
    """H_{e^eps}(P||Q) (remove) or H_{e^eps}(Q||P), P = sum w N(s, 1), Q = N(0, 1), by
    adaptive quadrature of the positive part of the density difference."""

    root = math.sqrt(2 * math.pi)

    def p(x: float) -> float:
        return float(np.dot(weights, np.exp(-0.5 * (x - shifts) ** 2))) / root

    def f(x: float) -> float:
        q = math.exp(-0.5 * x * x) / root
        return max(0.0, p(x) - math.exp(eps) * q) if remove else max(0.0, q - math.exp(eps) * p(x))

    top = float(shifts.max())
    points = list(np.linspace(-12.0, top + 12.0, 60))
    value, _ = integrate.quad(f, -40.0, top + 40.0, points=points, limit=2000, epsabs=1e-13)
    return value


def oracle_epsilon(weights: np.ndarray, shifts: np.ndarray, delta: float) -> float:
    out = 0.0
    for remove in (True, False):
        if oracle_delta(weights, shifts, 0.0, remove) <= delta:
            continue
        out = max(
            out,
            optimize.brentq(
                lambda e, r=remove: oracle_delta(weights, shifts, e, r) - delta,
                0.0,
                30.0,
                xtol=1e-6,
            ),
        )
    return out


def oracle_rdp2(weights: np.ndarray, shifts: np.ndarray) -> float:
    """D_2(P||Q) in closed form: E_Q[(P/Q)^2] = sum_jk w_j w_k exp(s_j s_k)."""
    return float(np.log(weights @ np.exp(np.outer(shifts, shifts)) @ weights))


@pytest.mark.parametrize(
    "groups",
    [
        [(24, 0.05, 0.2)],  # 24 equal runs
        [(12, 0.02, 0.15), (12, 0.1, 0.3)],  # 24 runs, two kinds
        [(32, 0.03, 0.08), (32, 0.06, 0.12)],  # 64 runs
    ],
)
def test_merged_step_of_many_runs_matches_a_quadrature_oracle(groups: list) -> None:
    """The grid convolution (shifts rounded up) is an upper bound within 1% of the exact
    mixture's epsilon, and of its order-2 Renyi divergence."""
    q = np.concatenate([np.full(n, qi) for n, qi, _ in groups])
    a = np.concatenate([np.full(n, ai) for n, _, ai in groups])
    ours = merged_step_mixture(q, a)
    assert abs(ours.probs.sum() - 1.0) < 1e-12
    weights, shifts = binomial_groups(groups)
    exact = oracle_epsilon(weights, shifts, 1e-6)
    got = mixture_pld(ours, 1e-3).get_epsilon_for_delta(1e-6)
    assert exact - 1e-5 <= got <= exact * 1.01 + 2e-3
    forward, _ = mixture_rdp(ours, [2.0])
    exact2 = oracle_rdp2(weights, shifts)
    assert exact2 * (1 - 1e-9) <= forward[0] <= exact2 * 1.01


# ---- joint release of many models with few mechanisms ------------------------------------


def test_joint_release_of_repeated_mechanisms_matches_dp_accounting() -> None:
    """k runs of one DP-SGD mechanism, jointly: dp_accounting's PLD of one run of k T
    steps is the reference (pessimistic: ours within 0.2%; optimistic: ours above)."""
    q, sigma, steps, k = 0.02, 1.1, 40, 25
    profile = compute_profile(parse_mechanism(sgd(sigma, steps=steps, q=q)))
    eps, used = joint_release_epsilon([profile] * k, 1e-5)

    def ref(pessimistic: bool) -> float:
        pld = pldlib.from_gaussian_mechanism(
            sigma,
            sampling_prob=q,
            value_discretization_interval=1e-4,
            pessimistic_estimate=pessimistic,
        ).self_compose(steps * k)
        return float(pld.get_epsilon_for_delta(1e-5))

    assert used == "pld"
    assert eps >= ref(False)
    assert eps == pytest.approx(ref(True), rel=2e-3)


def test_grouping_agrees_with_one_by_one_composition() -> None:
    a = compute_profile(parse_mechanism(sgd(0.9, steps=30, q=0.03)))
    b = compute_profile(parse_mechanism(sgd(1.4, steps=60, q=0.01)))
    profiles = [a, b, a, a, b]
    assert [k for _, k in grouped(profiles)] == sorted(
        [3, 2], key=lambda k: {3: a, 2: b}[k].mechanism_hash
    )
    eps, _ = joint_release_epsilon(profiles, 1e-6)
    one_by_one = lc.joint_epsilon(profiles, 1e-6, "best")
    assert eps == pytest.approx(one_by_one, rel=2e-3)
    assert joint_release_epsilon([a, b], 1e-6)[0] < eps


# ---- LC plans over many models ------------------------------------------------------------


@pytest.mark.parametrize("n", [24, 64])
def test_lc_plans_over_many_distinct_models_answer(n: int) -> None:
    """N DP-SGD runs with distinct noise: the LC plan answers (supports chosen in
    polynomial time, the merged step a convolution), and its epsilon is the certificate
    of the weights it returns, at or under the target. (Coarse PLDs: the profiles are
    not what is tested, and dominate the time.)"""
    mechs = [parse_mechanism(sgd(0.9 + 0.01 * i, steps=20, q=0.05)) for i in range(n)]
    cands = [
        Candidate(f"m{i}", m, compute_profile(m, discretization=1e-3), {}, f"m{i}", None, "s")
        for i, m in enumerate(mechs)
    ]
    single = cands[0].profile.epsilon(1e-5, "best")
    spec = PlanRequestSpec(epsilon=single * 1.5, delta=1e-5, method="lc", accountant="rdp")
    plan = make_plan(cands, spec)
    assert plan.method == "lc" and plan.epsilon <= spec.epsilon
    chosen = [int(mid[1:]) for mid in plan.weights]
    assert len(chosen) >= 2
    inputs = [lc.lc_input(mechs[i]) for i in chosen]
    released = [
        lc.released_profile(inp, cands[i].profile) for inp, i in zip(inputs, chosen, strict=True)
    ]
    lam = np.array([plan.weights[f"m{i}"] for i in chosen])
    again = lc.LCAccountant(inputs, released, 1e-5).certify(lam, "rdp")
    assert again == pytest.approx(plan.epsilon, rel=1e-9)
