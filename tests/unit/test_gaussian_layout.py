"""Where a Gaussian release's sensitivity and noise enter its profile and its LC input,
against closed forms (nothing from service.accounting computes the expected values)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.accounting.lc import accountant as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile
from tests.oracles import gaussian_delta


def _exact_eps(mu: float, delta: float) -> float:
    lo, hi = 0.0, 1.0
    while gaussian_delta(mu, hi) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gaussian_delta(mu, mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize(
    "noise", [{"noise_std": 5.0}, {"noise_multiplier": 2.0}], ids=["std", "multiplier"]
)
def test_profile_uses_noise_over_sensitivity(noise: dict) -> None:
    """sensitivity 2.5, std 5, 3 queries: mu = sqrt(3) * 2.5 / 5."""
    mech = parse_mechanism({"type": "gaussian", "sensitivity": 2.5, "count": 3, **noise})
    profile = compute_profile(mech)
    exact = _exact_eps(math.sqrt(3) / 2.0, 1e-5)
    for accountant in ("rdp", "pld", "best"):
        assert profile.epsilon(1e-5, accountant) >= exact * (1 - 1e-9), accountant  # type: ignore[arg-type]
    assert profile.epsilon(1e-5, "pld") == pytest.approx(exact, rel=2e-3)


def test_lc_input_of_a_gaussian_release() -> None:
    g = parse_mechanism(
        {"type": "gaussian", "sensitivity": 2.5, "noise_std": 5.0, "count": 3, "adaptive": False}
    )
    inp = lc.lc_input(g)
    assert inp.final is not None and inp.fixed_queries == 3
    assert (inp.final.q, inp.final.shift, inp.final.noise) == (1.0, 2.5, 5.0)
    assert inp.released is not None and inp.released.count == 2  # type: ignore[union-attr]


def test_fixed_queries_mu_bounds_every_linear_layout() -> None:
    """Unequal counts and sensitivities: the merged answers query by query (each model's
    answers side by side) and summed (each model the sum of its answers) are both
    Gaussian; the certificate's mu is at least either's."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 4))
        counts = rng.integers(1, 5, n)
        sens = rng.uniform(0.1, 2.0, n)
        std = rng.uniform(0.1, 3.0, n)
        lam = rng.dirichlet(np.ones(n))
        inputs = [
            lc.lc_input(
                parse_mechanism(
                    {
                        "type": "gaussian",
                        "sensitivity": float(sens[i]),
                        "noise_std": float(std[i]),
                        "count": int(counts[i]),
                        "adaptive": False,
                    }
                )
            )
            for i in range(n)
        ]
        mu = lc.fixed_queries_mu(inputs, lam)
        side = sum(
            float(np.sum(lam[counts > j] * sens[counts > j])) ** 2
            / float(np.sum((lam[counts > j] * std[counts > j]) ** 2))
            for j in range(int(counts.max()))
        )
        summed = float(np.sum(lam * counts * sens)) ** 2 / float(np.sum(lam**2 * counts * std**2))
        assert mu >= math.sqrt(max(side, summed)) * (1 - 1e-12)
