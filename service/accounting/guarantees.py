"""The guarantee of given weights: what a fixed RS or LC mix of models proves.

Plans search for weights; this answers the converse question for weights the
caller already has ("what is this mix worth at delta?"), under each accountant,
with the same bounds the plans use: Theorems 5.1/5.2 (RS), 6.2/6.4 (LC with
shared DP-SGD structure) or 6.1 (LC otherwise) of papers/dp-model-merging.txt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from service.accounting import linear_combination as lc
from service.accounting import random_selection as rs
from service.accounting.conversions import ORDERS, check_delta
from service.accounting.planning import Candidate, _curves_at, lc_candidates
from service.accounting.pld import DEFAULT_DISCRETIZATION
from service.errors import InvalidInput

#: How far the weights may sum from 1 (they are renormalised within it).
WEIGHT_SUM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Guarantee:
    method: str
    delta: float
    by_accountant: dict[str, float]
    bound: str

    @property
    def best(self) -> tuple[float, str]:
        return min((eps, acc) for acc, eps in self.by_accountant.items())


def guarantee(
    candidates: list[Candidate],
    weights: list[float],
    method: str,
    delta: float,
    accountants: tuple[str, ...],
) -> Guarantee:
    check_delta(delta)
    w = np.asarray(weights, dtype=float)
    if np.any(~np.isfinite(w)) or np.any(w < 0) or abs(w.sum() - 1.0) > WEIGHT_SUM_TOLERANCE:
        raise InvalidInput(f"weights must be >= 0 and sum to 1, got sum {float(w.sum())}")
    w = w / w.sum()
    keep = [i for i, x in enumerate(w) if x > 0]
    chosen, w = [candidates[i] for i in keep], w[keep]
    out: dict[str, float] = {}
    if method == "rs":
        for acc in accountants:
            if acc == "rdp":
                rdp = np.array([c.profile.rdp_at(ORDERS) for c in chosen])
                out[acc] = rs.rs_rdp_epsilon(w, rdp, ORDERS, delta)
            else:
                out[acc] = rs.rs_pld_epsilon(w, _curves_at(chosen), delta)
        return Guarantee("rs", delta, out, "Theorems 5.1 (RDP) and 5.2 (PLD): random selection")
    if method != "lc":
        raise InvalidInput(f"method must be 'rs' or 'lc', got {method!r}")
    kept, structures, _ = lc_candidates(chosen, strict=True)
    structured = (
        all(s is not None for s in structures) and len({c.mechanism.type for c in kept}) == 1
    )
    if structured:
        structs = [s for s in structures if s is not None]
        for acc in accountants:
            out[acc] = (
                lc.lc_rdp_epsilon(structs, w, delta)
                if acc == "rdp"
                else lc.lc_pld_epsilon(structs, w, delta, DEFAULT_DISCRETIZATION)
            )
        return Guarantee("lc", delta, out, "Theorems 6.2 (RDP) and 6.4 (PLD): linear combination")
    profiles = [c.profile for c in kept]
    for acc in accountants:
        out[acc] = lc.joint_epsilon(profiles, delta, acc)
    out = {k: (v if math.isfinite(v) else math.inf) for k, v in out.items()}
    return Guarantee("lc", delta, out, "Theorem 6.1: joint release of the merged models")
