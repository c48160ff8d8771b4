"""The profile of model splitting and dropout (``model_splitting``): its RDP curve.

The RDP of one step, split and shared parts under one Poisson draw, is
``bis.splitting.step_rdp`` (forward exact at integer orders, reverse certified); the
steps compose by adding it. No PLD is built: the PLD accountant uses the privacy profile
derived from the RDP curve (Balle et al. 2020), sound and looser than a PLD would be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from service.accounting.bis import splitting
from service.accounting.conversions import ORDERS
from service.accounting.cost import CostLimits, exceeds, model_splitting_cost
from service.accounting.mechanisms import BalancedIterationSubsampling, ModelSplitting
from service.accounting.rdp.profile import RdpProfile, safe

#: Integer orders of the curve: every one up to 64, then ORDERS' up to the top order.
SPLIT_ORDERS = np.union1d(
    np.arange(2.0, 65.0),
    ORDERS[(ORDERS > 64) & (np.floor(ORDERS) == ORDERS) & (ORDERS <= splitting.TOP_ORDER)],
)


def model_splitting_parts(
    mech: ModelSplitting,
    discretization: float,
    limits: CostLimits,
    bis_builder: Callable[[Any, float, CostLimits], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The profile's parts. Without Poisson sampling or a shared part, one step is one
    epoch of balanced iteration subsampling (d iterations, k participations: the parts
    are the iterations) and ``bis_builder`` builds it, certified PLD included."""
    if bis_builder is not None and mech.sampling_rate == 1.0 and mech.shared == 0.0:
        record = BalancedIterationSubsampling(
            type="balanced_iteration_subsampling",
            iterations=mech.parts,
            participations=mech.parts_per_example,
            noise_multiplier=mech.noise_multiplier,
            clipping_norm=mech.clipping_norm,
            epochs=mech.steps,
        )
        built = bis_builder(record, discretization, limits)
        built["notes"].append(
            "no Poisson sampling and no shared part: each step is one epoch of balanced "
            "iteration subsampling over the parts (the same pair), accounted as such"
        )
        return built
    over = exceeds(model_splitting_cost(mech), limits)
    if over:
        raise ValueError(over[0])
    d, k, s = mech.parts, mech.parts_per_example, mech.noise_multiplier
    q, shared = mech.sampling_rate, mech.shared
    fwd, rev = splitting.step_rdp(d, k, s, shared, q, SPLIT_ORDERS)
    per_step = np.maximum(fwd, rev)
    rdp = RdpProfile(SPLIT_ORDERS, safe(mech.steps * per_step))
    notes = [
        "no PLD: the PLD accountant uses the privacy profile derived from RDP "
        "(Balle et al. 2020): sound, looser",
    ]
    if shared > 0 and q < 1:
        notes.append(
            "the shared and split parts are accounted jointly under their one Poisson draw "
            "(adding their RDPs would understate the loss)"
        )
    if q < 1 and k > 1 and d > k:
        notes.append(
            "k > 1 parts per example under Poisson sampling: the reverse direction is bounded "
            "by the subsampled Gaussian of sensitivity sqrt(shared^2 + k) (no amplification "
            "in that direction)"
        )
    reverse_wins = [float(a) for a, f, r in zip(SPLIT_ORDERS, fwd, rev, strict=True) if r > f]
    return {
        "rdp": rdp,
        "pld": None,
        "notes": notes,
        "methods": {
            "rdp": f"forward: {splitting.FORWARD_METHOD}; reverse: {splitting.REVERSE_METHOD}; "
            "each integer order takes the larger direction; fractional orders by the "
            "convexity chord; steps composed",
            "pld": "derived from RDP",
        },
        "parameters": {"reverse_larger_at_orders": reverse_wins},
    }
