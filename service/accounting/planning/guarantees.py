"""The guarantee of given weights: what a fixed RS or LC mix of models proves.

Plans search for weights; this answers the converse question for weights the
caller already has ("what is this mix worth at delta?"), under each accountant,
with the same bounds the plans use: Theorems 5.1/5.2 of
"Differentially Private Model Merging" (arXiv:2604.20985) for RS (weights fixed without reading
the models),
and for LC the sound bound of ``lc.accountant`` (each run before its last
step released jointly, plus one merged last step; the joint release, Theorem 6.1,
where a model has no mergeable last step). The paper's per-step LC composition is
reported beside it as ``paper_epsilon`` only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from service.accounting.conversions import check_delta
from service.accounting.lc import accountant as lc
from service.accounting.lc.paper import paper_epsilon
from service.accounting.planning import Candidate, curves_at, lc_candidates
from service.accounting.planning.lc import BOUND, JOINT_BOUND, released_profiles
from service.accounting.rs import bounds as rs
from service.errors import InvalidInput

#: How far the weights may sum from 1 (they are renormalised within it).
WEIGHT_SUM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Guarantee:
    method: str
    delta: float
    by_accountant: dict[str, float]
    bound: str
    notes: list[str] = field(default_factory=list)
    heuristic: bool = False
    paper_epsilon: float | None = None

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
    heuristic = any(c.profile.heuristic for c in chosen)
    if method == "rs":
        for acc in accountants:
            if acc == "rdp":
                out[acc] = rs.rs_rdp_epsilon_any_order(
                    w, lambda a: np.array([c.profile.rdp_at(a) for c in chosen]), delta
                )
            else:
                out[acc] = rs.rs_pld_epsilon(w, curves_at(chosen), delta)
        return Guarantee(
            "rs",
            delta,
            out,
            "Theorems 5.1 (RDP) and 5.2 (PLD): random selection",
            notes=["assumes the selection probabilities were fixed without reading the models"],
            heuristic=heuristic,
        )
    if method != "lc":
        raise InvalidInput(f"method must be 'rs' or 'lc', got {method!r}")
    kept, inputs, notes = lc_candidates(chosen, strict=True)
    acct = lc.LCAccountant(inputs, released_profiles(kept, inputs), delta)
    for acc in accountants:
        value = acct.certify(w, acc)
        out[acc] = value if math.isfinite(value) else math.inf
    if len(kept) > 1:
        notes.append("assumes: " + "; ".join(lc.ASSUMPTIONS))
    return Guarantee(
        "lc",
        delta,
        out,
        BOUND if acct.uses_final_step else JOINT_BOUND,
        notes=notes,
        heuristic=heuristic or acct.heuristic,
        paper_epsilon=paper_epsilon([c.mechanism for c in kept], w, delta),
    )
