"""Plans scored on a public validation split (``objective: "validation"``).

Choosing lambda by the accuracy of the merged models makes lambda a function
of the models themselves, so the LC theorems (6.2, 6.4), which hold for a
lambda fixed in advance, do not cover the result. What does: the choice is
post-processing of the joint release of every model that was scored
(Theorem 6.1 of "Differentially Private Model Merging" (arXiv:2604.20985)). So the plan first
picks a set S
of models whose joint release meets the target, then searches lambda over the
simplex on S for the best validation accuracy; any lambda on S, however it is
chosen, keeps S's guarantee, and the release exposes all of S in the ledger.

S is chosen from the mechanisms alone (among the maximal feasible sets, the one
whose models trained most: the least noise-to-signal ratio reachable on it, then the
smallest joint epsilon; a run is represented by its latest checkpoint that meets the
target), and only S is scored. Scoring several candidate sets
and keeping the most accurate would make the answer a function of every model
in their union, and the union of two different maximal feasible sets is itself
infeasible (else a larger feasible set would contain both): no bound at the
target would cover it.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
from numpy.typing import NDArray

from service.accounting.planning.joint import joint
from service.accounting.planning.lc import lc_candidates
from service.accounting.planning.runs import latest_fitting
from service.accounting.planning.signal import noise_to_signal
from service.accounting.planning.types import (
    Candidate,
    Evaluate,
    Plan,
    PlanRequestSpec,
    infeasible,
    noise_variance,
)
from service.errors import Unsupported

#: Forward passes one plan may run (each: merge in memory, score the split).
EVALUATION_BUDGET = 120
#: Largest feasible subsets searched.
MAX_SUBSETS = 4
#: The subset enumeration is exponential: at most this many models.
MAX_SUBSET_MODELS = 12


def plan_validation(
    candidates: list[Candidate], spec: PlanRequestSpec, evaluate: Evaluate | None
) -> Plan:
    if spec.method not in ("lc", "auto"):
        raise Unsupported(
            "objective 'validation' scores merged weights: use method 'lc' or 'auto' "
            "(random selection is scored by a declared metric, objective 'metric')"
        )
    if evaluate is None:
        raise Unsupported(
            "objective 'validation' needs the dataset's public validation split "
            "(PUT /v1/datasets/{id}/validation) and models that declare an architecture"
        )
    run_notes: list[str] = []
    if not spec.strict:  # named checkpoints of one run: refused below, with the reason
        candidates, run_notes = latest_fitting(candidates, spec, keep_later=False)
    kept, _, notes = lc_candidates(candidates, spec.strict)
    notes = run_notes + notes
    if len(kept) > MAX_SUBSET_MODELS:
        raise Unsupported(
            f"objective 'validation' enumerates subsets of the models: at most "
            f"{MAX_SUBSET_MODELS}; name the candidates with model_ids"
        )
    subsets, min_seen = maximal_feasible_subsets(kept, spec)
    if not subsets:
        raise infeasible(spec, min_seen, "no set of models (joint release)")
    # one set, chosen from the mechanisms only: every model scored is in it (module doc)
    idx, eps, used = subsets[0]
    variances = np.array([noise_variance(c.mechanism) or 0.0 for c in kept])
    search = _Search(kept, evaluate, variances)
    lam, (accuracy, _) = search.best_on(idx)
    scored = [kept[i].id for i in idx]
    return Plan(
        method="lc",
        accountant=used,  # type: ignore[arg-type]
        weights={kept[i].id: float(lam[i]) for i in idx if lam[i] > 0},
        epsilon=eps,
        delta=spec.delta,
        objective="validation",
        objective_value=accuracy,
        expected_utility=accuracy,
        bound="Theorem 6.1 (joint release of the models scored on the validation split)",
        notes=[
            *notes,
            f"weights chosen by accuracy on the public validation split over {len(idx)} "
            f"model(s) whose joint release meets the target ({search.evaluations} forward "
            "passes); the choice depends on every one of them, so the release exposes all",
        ],
        exposed=sorted(scored),
    )


def maximal_feasible_subsets(
    kept: list[Candidate], spec: PlanRequestSpec
) -> tuple[list[tuple[list[int], float, str]], float]:
    """The largest sets of models whose joint release meets the target (at most
    ``MAX_SUBSETS``, largest first), and the smallest joint epsilon seen.

    Adding a model never lowers a joint epsilon, so a set with an infeasible subset
    is skipped without accounting it."""
    n = len(kept)
    feasible: list[tuple[list[int], float, str]] = []
    infeasible: list[frozenset[int]] = []
    min_seen = math.inf
    for size in range(1, n + 1):
        for idx in combinations(range(n), size):
            s = frozenset(idx)
            if any(bad <= s for bad in infeasible):
                continue
            eps, used = joint(spec, [kept[i].profile for i in idx])
            min_seen = min(min_seen, eps)
            if eps <= spec.epsilon:
                feasible.append((list(idx), eps, used))
            else:
                infeasible.append(s)
    maximal = [
        f for f in feasible if not any(set(f[0]) < set(g[0]) for g in feasible if g is not f)
    ]
    maximal.sort(key=lambda f: (_floor([kept[i] for i in f[0]]), f[1]))
    return maximal[:MAX_SUBSETS], min_seen


def _floor(models: list[Candidate]) -> float:
    """The least noise-to-signal ratio any weights on the set could reach (inverse-ratio
    weights: 1 / sum_i 1 / NSR_i), from the mechanisms only: the set scored is the one
    that trained most, not the one with the most (or the least private) models."""
    ratios = [noise_to_signal(c.mechanism) for c in models]
    if any(r is None or r <= 0 for r in ratios):
        return math.inf
    return 1.0 / sum(1.0 / r for r in ratios if r)


class _Search:
    """Best lambda on the simplex over a set of models: the vertices, the uniform
    mix, then pairwise weight transfers that raise accuracy (ties: less noise)."""

    def __init__(self, kept: list[Candidate], evaluate: Evaluate, variances: NDArray) -> None:
        self.kept = kept
        self.evaluate = evaluate
        self.v = variances
        self.cache: dict[bytes, tuple[float, float]] = {}

    @property
    def evaluations(self) -> int:
        return len(self.cache)

    def key(self, lam: NDArray) -> tuple[float, float]:
        k = np.round(lam, 9).tobytes()
        if k not in self.cache:
            weights = {c.id: float(w) for c, w in zip(self.kept, lam, strict=True) if w > 0}
            self.cache[k] = (self.evaluate(weights), -float(np.sum(lam**2 * self.v)))
        return self.cache[k]

    def best_on(self, idx: list[int]) -> tuple[NDArray, tuple[float, float]]:
        n = len(self.kept)
        starts = [np.eye(n)[i] for i in idx]
        uniform = np.zeros(n)
        uniform[idx] = 1.0 / len(idx)
        starts.append(uniform)
        lam = max(starts, key=self.key)
        for step in (0.25, 0.1, 0.05, 0.02):
            improved = True
            while improved and self.evaluations < EVALUATION_BUDGET:
                improved = False
                for i in idx:
                    for j in idx:
                        if i == j or lam[j] < step - 1e-12:
                            continue
                        cand = lam.copy()
                        cand[i] += step
                        cand[j] = max(0.0, cand[j] - step)
                        if self.evaluations >= EVALUATION_BUDGET:
                            break
                        if self.key(cand) > self.key(lam):
                            lam, improved = cand, True
        return lam, self.key(lam)
