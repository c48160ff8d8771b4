"""Tiny per-step RDP composed over millions of steps is never below the exact value."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from service.accounting.rdp import subsampled_gaussian_rdp
from service.accounting.rdp_profile import safe


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
