"""The model-splitting family of the tightness suite: its reference, written out.

Model splitting and dropout under Poisson subsampling have no known PLD; the tightest
sound figure is the exact RDP of the step, composed over the steps and converted at the
best order. The reference computes that RDP by a Gauss-Hermite product rule over the
shared and the split coordinates written out (d = 2, 3 parts, one part reached per
example), independently of the service's moment expansions and Laplace-transform
bounds, and converts it with the same conversion as the profiles. Sound: the service's
step RDP is at least the quadrature's at every order checked.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from service.accounting.bis.splitting import step_rdp
from service.accounting.conversions import eps_from_rdp

#: (parts d, noise multiplier, shared clipping / clipping, sampling rate, steps)
SPLITTING = [
    (2, 1.5, 0.0, 0.3, 20),  # dropout p = 0.5, no shared part
    (2, 1.5, 1.0, 0.3, 20),  # dropout beside a shared part of the same clipping
    (3, 2.0, 1.0, 0.5, 10),  # a three-way split
    (2, 1.0, 0.0, 0.05, 200),  # a small rate, more steps
    (2, 2.0, 0.5, 1.0, 10),  # no subsampling, a shared part
    (3, 4.0, 0.0, 1.0, 100),  # neither: one BIS participation per step, its certified PLD
]

#: Orders of the reference (integers: the quadrature's), and those checked for soundness.
ORDERS = np.arange(2.0, 49.0)
SOUND_ORDERS = [2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]


def mechanism(d: int, s: float, shared: float, q: float, steps: int) -> dict[str, Any]:
    return {
        "type": "model_splitting",
        "parts": d,
        "noise_multiplier": s,
        "clipping_norm": 1.0,
        "shared_clipping_norm": shared,
        "sampling_rate": q,
        "steps": steps,
    }


def quadrature_rdp(
    d: int, s: float, shared: float, q: float, orders: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(D_alpha(M || Q), D_alpha(Q || M)) of one step: E_Q[R^alpha] and E_Q[R^(1 - alpha)]
    of R = 1 - q + q Z_0 (1/d) sum_j Z_j, each Z a mean-one lognormal written as its
    Gaussian coordinate, by a (d + 1)-dimensional Gauss-Hermite rule (60 or 36 points)."""
    x, w = np.polynomial.hermite_e.hermegauss(60 if d == 2 else 36)
    w = w / math.sqrt(2 * math.pi)
    dims = d + (1 if shared > 0 else 0)
    coords = [g.ravel() for g in np.meshgrid(*([x] * dims), indexing="ij")]
    weight = np.prod(np.stack(np.meshgrid(*([w] * dims), indexing="ij")), 0).ravel()
    ratio = sum(np.exp(c / s - 1 / (2 * s * s)) for c in coords[:d]) / d
    if shared > 0:
        b = shared / s
        ratio = ratio * np.exp(b * coords[d] - b * b / 2)
    log_r = np.log(1 - q + q * ratio)
    log_w = np.log(weight)

    def divergence(power: np.ndarray) -> np.ndarray:
        terms = np.multiply.outer(power, log_r) + log_w
        top = terms.max(axis=1, keepdims=True)
        return (np.log(np.exp(terms - top).sum(axis=1)) + top[:, 0]) / (orders - 1)

    return divergence(orders), divergence(1 - orders)


def reference(d: int, s: float, shared: float, q: float, steps: int, delta: float) -> float:
    fwd, rev = quadrature_rdp(d, s, shared, q, ORDERS)
    return float(eps_from_rdp(ORDERS, steps * np.maximum(fwd, rev), delta))


def sound(d: int, s: float, shared: float, q: float) -> bool:
    """The service's step RDP is at least the quadrature's, both directions, every order
    checked (to 1e-9 of rounding)."""
    orders = np.array(SOUND_ORDERS)
    fwd, rev = step_rdp(d, 1, s, shared, q, list(orders))
    f_ref, r_ref = quadrature_rdp(d, s, shared, q, orders)
    return bool(np.all(fwd >= f_ref * (1 - 1e-9)) and np.all(rev >= r_ref * (1 - 1e-9)))
