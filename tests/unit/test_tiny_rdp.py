"""Tiny per-step RDP composed over millions of steps is never below the exact value."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from service.accounting.rdp.gaussian import subsampled_gaussian_rdp
from service.accounting.rdp.profile import safe


def _exact_rdp_int(q: float, sigma: float, alpha: int) -> mp.mpf:
    """log A_alpha / (alpha - 1) at 60 digits, A_alpha by its binomial expansion."""
    mp.mp.dps = 60
    q_, s_ = mp.mpf(q), mp.mpf(sigma)
    total = mp.fsum(
        mp.binomial(alpha, k) * q_**k * (1 - q_) ** (alpha - k) * mp.exp((k * k - k) / (2 * s_**2))
        for k in range(alpha + 1)
    )
    return mp.log(total) / (alpha - 1)


@pytest.mark.parametrize(
    ("q", "sigma", "steps"),
    [(1e-6, 1.0, 10**7), (1e-5, 3.0, 10**6), (1e-4, 30.0, 2 * 10**6), (0.3, 50.0, 10**6)],
)
def test_composed_tiny_rdp_is_never_below_the_exact_value(
    q: float, sigma: float, steps: int
) -> None:
    orders = [2, 3, 8, 32, 128]
    raw = subsampled_gaussian_rdp(q, sigma, np.array(orders, dtype=float))[0] * steps
    for alpha, value, stored in zip(orders, raw, safe(raw), strict=True):
        exact = _exact_rdp_int(q, sigma, alpha) * steps
        # What a profile stores (with its 1e-9 relative margin) is never below the truth.
        assert stored >= exact, (alpha, stored, exact)
        # The computation itself is accurate to float rounding, far inside that margin.
        assert abs(value - exact) <= exact * 1e-12, (alpha, value, exact)


@pytest.mark.parametrize("sigma", [1e8, 3e7, 1e9])
def test_a_tiny_rdp_never_proves_epsilon_zero_below_the_exact_delta(sigma: float) -> None:
    """sqrt(1 - e^(-rdp)) (the KL route) must not round to 0 when rdp is below float
    spacing at 1: the exact hockey-stick at epsilon 0, erf(mu / (2 sqrt 2)), is the oracle."""
    from service.accounting.mechanisms import parse_mechanism
    from service.accounting.profiles.profile import compute_profile

    mech = {"type": "gaussian", "sensitivity": 1.0, "noise_multiplier": sigma}
    profile = compute_profile(parse_mechanism(mech))
    mp.mp.dps = 50
    exact = float(mp.erf(1 / (mp.mpf(sigma) * 2 * mp.sqrt(2))))
    assert profile.delta(0.0, "rdp") >= exact
    for accountant in ("rdp", "best"):
        assert profile.epsilon(exact / 10, accountant) > 0.0, accountant  # type: ignore[arg-type]


@pytest.mark.parametrize("rdp", [1e-30, 3e-17, 1e-12])
def test_kl_route_keeps_full_precision(rdp: float) -> None:
    from service.accounting.conversions import delta_from_rdp, delta_from_rdp_grid
    from service.accounting.rdp.orders import conversion_epsilon, conversion_log_delta

    mp.mp.dps = 50
    exact = float(mp.sqrt(-mp.expm1(-mp.mpf(rdp))))  # Bretagnolle-Huber at epsilon 0
    orders = np.array([1.5, 2.0, 64.0])
    values = np.full(3, rdp)
    assert delta_from_rdp(orders, values, 0.0) >= exact * (1 - 1e-12)
    assert delta_from_rdp_grid(orders, values, [0.0])[0] >= exact * (1 - 1e-12)
    assert np.exp(conversion_log_delta(orders, values, 0.0)).min() >= exact * (1 - 1e-12)
    assert conversion_epsilon(orders, values, exact / 2).min() > 0.0


def _rr_rdp_exact(eps0: float, alpha: float) -> mp.mpf:
    mp.mp.dps = 80
    e, a = mp.mpf(eps0), mp.mpf(alpha)
    p = mp.exp(e) / (1 + mp.exp(e))
    return mp.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)


@pytest.mark.parametrize("eps0", [1e-9, 1e-7, 1e-5, 1e-3, 0.5, 5.0, 40.0])
def test_randomized_response_rdp_is_never_below_the_exact_value(eps0: float) -> None:
    """Pure eps0-DP's curve (Mironov 2017, Prop. 5) for a tiny eps0 is ~ alpha eps0^2 / 2:
    summing the two terms in float64 lost it (0 at eps0 = 1e-9)."""
    from service.accounting.rdp.profile import randomized_response_rdp, safe

    orders = np.array([1.001, 1.5, 2.0, 3.0, 10.0, 100.0, 1000.0, 1e5])
    values = randomized_response_rdp(eps0, orders)
    for alpha, value, stored in zip(orders, values, safe(values), strict=True):
        exact = min(_rr_rdp_exact(eps0, alpha), mp.mpf(eps0))
        assert stored >= exact, (alpha, stored, exact)
        assert abs(value - exact) <= exact * 1e-12, (alpha, value, exact)


def test_a_tiny_pure_dp_guarantee_never_proves_epsilon_zero() -> None:
    """eps0-DP with eps0 = 1e-9: randomized response has delta(0) = tanh(eps0 / 2), so no
    smaller delta has epsilon 0."""
    from service.accounting.mechanisms import parse_mechanism
    from service.accounting.profiles.profile import compute_profile

    eps0 = 1e-9
    profile = compute_profile(
        parse_mechanism({"type": "epsilon_delta", "epsilon": eps0, "delta": 0})
    )
    tv = float(mp.tanh(mp.mpf(eps0) / 2))
    assert profile.epsilon(tv / 10, "rdp") > 0.0
    assert profile.delta(0.0, "rdp") >= tv


def test_an_rdp_that_underflows_is_never_zero() -> None:
    """q = 1e-200: the RDP (~ q^2) is below the float range, but the mechanism is not
    free: delta(0) is about T q erf(1 / (2 sqrt 2 sigma)) = 3.8e-200 > 1e-250."""
    from service.accounting.mechanisms import parse_mechanism
    from service.accounting.profiles.profile import compute_profile

    mech = {
        "type": "dp_sgd",
        "sampling_rate": 1e-200,
        "noise_multiplier": 1.0,
        "clipping_norm": 1.0,
        "steps": 10,
    }
    assert np.all(subsampled_gaussian_rdp(1e-200, 1.0, np.array([2.0, 3.0, 64.0])) > 0)
    profile = compute_profile(parse_mechanism(mech))
    assert profile.delta(0.0, "rdp") > 3.8e-200
    for accountant in ("rdp", "best"):
        assert profile.epsilon(1e-250, accountant) > 0.0, accountant  # type: ignore[arg-type]


def _mixture_rdp_exact(q: list[float], a: list[float], alpha: int) -> mp.mpf:
    """D_alpha(sum_J p_J N(A_J, 1) || N(0, 1)) at 60 digits: E_Q[prod_j M] over alpha
    independent component choices is sum p_J1..p_Jalpha exp(sum_{i<j} A_Ji A_Jj)."""
    import itertools

    mp.mp.dps = 60
    comps = []
    for mask in itertools.product([0, 1], repeat=len(q)):
        p = mp.mpf(1)
        shift = mp.mpf(0)
        for z, qi, ai in zip(mask, q, a, strict=True):
            p *= mp.mpf(qi) if z else 1 - mp.mpf(qi)
            shift += mp.mpf(ai) * z
        comps.append((p, shift))
    total = mp.mpf(0)
    for choice in itertools.product(comps, repeat=alpha):
        p = mp.fprod(c[0] for c in choice)
        cross = mp.fsum(
            choice[i][1] * choice[j][1] for i in range(alpha) for j in range(i + 1, alpha)
        )
        total += p * mp.exp(cross)
    return mp.log(total) / (alpha - 1)


@pytest.mark.parametrize(
    ("q", "a"),
    [
        ([0.01], [1e-6]),
        ([0.5], [1e-8]),
        ([1e-4], [0.01]),
        ([0.01, 0.02], [1e-5, 2e-5]),
        ([0.3, 0.5], [1e-7, 3e-8]),
        ([1e-3, 0.2, 0.05], [1e-3, 1e-4, 1e-2]),
    ],
)
def test_a_tiny_merged_step_is_never_below_its_exact_rdp(q: list[float], a: list[float]) -> None:
    """The merged LC step's quadrature returned 1 + O(a^2) minus rounding: 0 or less than
    the exact RDP when the noise is huge or q small. Oracle: the 60-digit expansion."""
    from service.accounting.lc.mixture import lc_mixture, mixture_rdp

    orders = [2, 3]
    forward, _ = mixture_rdp(lc_mixture(q, a), np.array(orders, dtype=float))
    for alpha, value in zip(orders, forward, strict=True):
        exact = _mixture_rdp_exact(q, a, alpha)
        # what a certificate uses (with its 1e-9 margin) is never below the truth
        assert value * (1 + 1e-9) >= exact, (alpha, value, exact)
        assert value >= exact * (1 - 1e-12), (alpha, value, exact)
