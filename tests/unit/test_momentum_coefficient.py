"""The last gradient's coefficient in the weights, against PyTorch's SGD unrolled.

LC accounting weighs each run's last noisy gradient by the coefficient it has in
the final weights. The oracle is ``torch.optim.SGD`` itself: run the optimizer on
known gradients, perturb the last one and read how far the weights move.
"""

from __future__ import annotations

import math

import pytest
import torch

from service.accounting.lc import accountant as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate
from service.accounting.planning.guarantees import guarantee
from service.accounting.profiles.profile import compute_profile
from tests.oracles import gaussian_delta


def _torch_last_coefficient(
    steps: int, lr: float, momentum: float, dampening: float, nesterov: bool
) -> float:
    """d theta_T / d g_T for PyTorch's SGD, by running it (linear in g_T: exact)."""

    def final(bump: float) -> float:
        p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.SGD([p], lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov)
        gen = torch.Generator().manual_seed(0)
        for t in range(steps):
            g = torch.randn(1, generator=gen, dtype=torch.float64)
            p.grad = g + (bump if t == steps - 1 else 0.0)
            opt.step()
        return float(p.detach()[0])

    return final(0.0) - final(1.0)  # theta moves by -coefficient * bump


CASES = [
    (1, 0.3, 0.9, 0.5, False),  # one step: the first update ignores dampening
    (1, 0.3, 0.9, 0.0, True),
    (1, 0.2, 0.0, 0.7, False),  # momentum 0: no buffer, dampening unused
    (5, 0.2, 0.0, 0.7, False),
    (5, 0.3, 0.9, 0.5, False),
    (5, 0.3, 0.9, 0.0, True),
    (2, 0.1, 0.5, 0.25, False),
]


@pytest.mark.parametrize(("steps", "lr", "momentum", "dampening", "nesterov"), CASES)
def test_last_gradient_coefficient_is_pytorchs(
    steps: int, lr: float, momentum: float, dampening: float, nesterov: bool
) -> None:
    mech = parse_mechanism(
        {
            "type": "dp_sgd",
            "sampling_rate": 0.1,
            "noise_multiplier": 1.0,
            "clipping_norm": 1.0,
            "steps": steps,
            "learning_rate": lr,
            "optimizer": "sgd_momentum",
            "momentum": momentum,
            "dampening": dampening,
            "nesterov": nesterov,
        }
    )
    final = lc.lc_input(mech).final
    assert final is not None
    expected = _torch_last_coefficient(steps, lr, momentum, dampening, nesterov)
    assert final.shift == pytest.approx(expected, rel=1e-9)
    assert final.noise == pytest.approx(expected, rel=1e-9)  # sigma C = 1


def _eps_of_mu(mu: float, delta: float) -> float:
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if gaussian_delta(mu, mid) <= delta else (mid, hi)
    return lo


def test_one_step_momentum_run_is_certified_at_its_exact_merge() -> None:
    """Two one-step runs with q = 1: both models are theta_0 - (g + sigma z) whatever the
    dampening, so the merge is Gaussian with mu = (l_1 + l_2) / sqrt(sum (l_i sigma_i)^2)."""
    damped = {
        "type": "dp_sgd",
        "sampling_rate": 1.0,
        "noise_multiplier": 1.0,
        "clipping_norm": 1.0,
        "steps": 1,
        "learning_rate": 1.0,
        "optimizer": "sgd_momentum",
        "momentum": 0.9,
        "dampening": 0.9,
    }
    plain = {**damped, "noise_multiplier": 4.0, "optimizer": "sgd"}
    del plain["momentum"], plain["dampening"]
    cands = [
        Candidate(
            id=f"m{i}", mechanism=parse_mechanism(r), profile=compute_profile(parse_mechanism(r))
        )
        for i, r in enumerate([damped, plain])
    ]
    ours = guarantee(cands, [0.5, 0.5], "lc", 1e-5, ("rdp", "pld")).best[0]
    exact = _eps_of_mu(1.0 / math.sqrt(0.5**2 * 1.0 + 0.5**2 * 16.0), 1e-5)
    assert ours >= exact
