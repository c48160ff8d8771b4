"""Private selection: pick the model with the best metric computed on private data.

``metric_source: "private"``: each candidate's metric u_i was computed on private
data (accuracy on n private validation examples), declared with its sensitivity
Delta_i (1/n for accuracy: adding, removing or replacing one example moves it by at
most 1/n). The service selects with report-noisy-max under Gumbel noise, which it
runs itself:

    i* = argmax_i ( s u_i / b + G_i ),  G_i iid Gumbel(0, 1),  b = 2 Delta / eps_sel,

s = +1 to maximise, -1 to minimise, Delta = max_i Delta_i. Then releases model i*.

Theorem (what the certificate covers). Let S be the eligible models (chosen from
the mechanisms alone, below) and M = (i*, theta_{i*}). For every pair of
neighbouring datasets, M is (eps_J(delta) + eps_sel, delta)-DP, where eps_J is the
joint release of the models in S (Theorem 6.1 of "Differentially Private Model Merging"
(arXiv:2604.20985);
checkpoints of one verified run count as their latest).

Proof. M is a function of (theta_S, i*), and i* is drawn given theta_S. (1) Given
theta_S, the map (metric data) -> i* is the exponential mechanism with utility
s u_i, sensitivity Delta and parameter eps_sel: Gumbel-max samples exactly
P(i) proportional to exp(s u_i / b) = exp(eps_sel s u_i / (2 Delta)), which is
eps_sel-DP (McSherry and Talwar 2007, "Mechanism design via differential
privacy"); the factor 2 covers utilities that move in different directions, as
accuracies of different models may when one example changes. (2) theta_S is
(eps_J(delta), delta)-DP. (3) Adaptive composition of a (eps_J, delta) mechanism
with one that is eps_sel-DP for every fixed value of its input gives
(eps_J + eps_sel, delta) (basic composition, Dwork and Roth, "The Algorithmic
Foundations of Differential Privacy", Thm 3.16, which holds adaptively). The
release of theta_{i*} adds nothing: it is a coordinate of theta_S. QED.

Why not the chosen model's own curve (the pointwise maximum over S) composed with
eps_sel: the metric u_i is a function of theta_i, so i* carries information about
every model in S, not only about the metric data. Counterexample: two models that
each answer a bit b with randomized response at epsilon e (P = e^e / (1 + e^e)),
metric = the answer itself, Delta tiny so the selection is a deterministic argmax
even at eps_sel = 0.1. Output (i*, theta_{i*}) is 0 only when both answered 0:
P[0 | b=0] / P[0 | b=1] = e^{2e}, so the view costs 2e > e + 0.1.
``tests/unit/test_private_selection.py`` checks this numerically.

Which models are eligible (S) is decided before any metric is read, from the
mechanisms only: models are added in order of their noise-to-signal ratio
(``planning.signal``, most trained first) while eps_J(S) + eps_sel meets the
target; a model that cannot fit the remaining budget is left out before selecting.
eps_sel is the request's ``selection_epsilon`` or ``SELECTION_SHARE`` of the target.

The noise is drawn once per selection with the OS CSPRNG by the caller
(``service.releases.selection``) and stored with the ledger's record of the
selection, so repeating the request shows the same choice and costs nothing new.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from service.accounting.planning.joint import joint
from service.accounting.planning.signal import noise_to_signal
from service.accounting.planning.types import Candidate, Plan, PlanRequestSpec, infeasible
from service.errors import InvalidInput, Unsupported

#: The selection's share of the target when the request does not name it.
SELECTION_SHARE = 0.1
#: Candidates a private selection may consider (the eligible set is built greedily).
MAX_CANDIDATES = 200
BOUND = (
    "private selection: report-noisy-max (Gumbel) at selection_epsilon, composed with "
    "the joint release of the eligible models (Theorem 6.1)"
)


def gumbel_scale(sensitivity: float, selection_epsilon: float) -> float:
    """b = 2 Delta / eps_sel: Gumbel-max at this scale is the exponential mechanism at eps_sel."""
    if not (sensitivity > 0 and selection_epsilon > 0):
        raise InvalidInput(
            f"sensitivity and selection_epsilon must be > 0, got {sensitivity}, {selection_epsilon}"
        )
    return 2.0 * sensitivity / selection_epsilon


def noisy_argmax(values: NDArray, scale: float, uniforms: Sequence[float]) -> int:
    """argmax_i values_i / scale + G_i with G_i = -log(-log U_i), U_i in (0, 1)."""
    u = np.clip(np.asarray(uniforms, dtype=np.float64), 1e-300, 1 - 1e-16)
    return int(np.argmax(np.asarray(values) / scale - np.log(-np.log(u))))


def selection_probabilities(values: NDArray, scale: float) -> NDArray:
    """The law of ``noisy_argmax``: softmax(values / scale) (the exponential mechanism)."""
    z = np.asarray(values, dtype=np.float64) / scale
    w = np.exp(z - z.max())
    return np.asarray(w / w.sum())


def plan_private_selection(candidates: list[Candidate], spec: PlanRequestSpec) -> Plan:
    """The eligible set and the certificate; the draw itself is the caller's (module doc).
    The plan's weights are empty until it is drawn; ``exposed`` lists the eligible models."""
    if not spec.metric:
        raise InvalidInput("metric_source 'private' needs a metric name (or a dataset metric)")
    if spec.metric_goal not in ("max", "min"):
        raise InvalidInput("metric_source 'private' needs metric_goal 'max' or 'min'")
    if spec.method not in ("rs", "auto"):
        raise Unsupported("a private selection releases one model: use method 'rs' or 'auto'")
    keep = [c for c in candidates if spec.metric in c.metrics]
    for c in keep:
        if c.metric_sources.get(spec.metric, "private") != "private":
            raise InvalidInput(
                f"metric {spec.metric!r} of model {c.label} is declared "
                f"{c.metric_sources[spec.metric]!r}, not 'private'",
                model_id=c.id,
            )
        if c.metric_sensitivities.get(spec.metric) is None:
            raise InvalidInput(
                f"metric {spec.metric!r} of model {c.label} has no declared sensitivity: a "
                "private selection needs one (accuracy on n examples: 1/n)",
                model_id=c.id,
            )
        value = c.metrics[spec.metric]
        if not 0.0 <= value <= 1.0:
            raise InvalidInput(f"metric {spec.metric!r} of model {c.label} is outside [0, 1]")
    if not keep:
        raise Unsupported(f"no candidate model has metric {spec.metric!r}")
    if len(keep) > MAX_CANDIDATES:
        raise Unsupported(f"a private selection considers at most {MAX_CANDIDATES} models")
    eps_sel = spec.selection_epsilon or SELECTION_SHARE * spec.epsilon
    if eps_sel >= spec.epsilon:
        raise InvalidInput(
            f"selection_epsilon ({eps_sel}) leaves nothing of the target ({spec.epsilon})"
        )
    budget = spec.epsilon - eps_sel
    eligible, eps_j, used, min_seen = _eligible(keep, spec, budget)
    if not eligible:
        raise infeasible(spec, min_seen + eps_sel, "a private selection")
    sensitivity = max(c.metric_sensitivities[spec.metric] for c in eligible)
    scale = gumbel_scale(sensitivity, eps_sel)
    sign = 1.0 if spec.metric_goal == "max" else -1.0
    left_out = len(keep) - len(eligible)
    return Plan(
        method="rs",
        accountant=used,  # type: ignore[arg-type]
        weights={},
        epsilon=eps_j + eps_sel,
        delta=spec.delta,
        objective="metric",
        objective_value=None,
        expected_utility=None,
        bound=BOUND,
        notes=[
            f"private selection by {spec.metric!r} ({spec.metric_goal}) among {len(eligible)} "
            f"model(s): report-noisy-max with Gumbel noise of scale {scale:.4g} (sensitivity "
            f"{sensitivity:g}), selection epsilon {eps_sel:g} (pure DP) + the eligible "
            f"models' joint release {eps_j:.4g} at delta {spec.delta:g}",
            *(
                [
                    f"{left_out} model(s) left out before selecting: they do not fit the "
                    "budget left after the selection"
                ]
                if left_out
                else []
            ),
            "the noise is drawn once per selection (CSPRNG) and kept: asking again shows "
            "the same choice",
        ],
        heuristic=any(c.profile.heuristic for c in eligible),
        exposed=sorted(c.id for c in eligible),
        selection_epsilon=eps_sel,
        selection={
            "metric": spec.metric,
            "eligible": [c.id for c in eligible],
            "values": [sign * c.metrics[spec.metric] for c in eligible],
            "scale": scale,
        },
    )


def _eligible(
    keep: list[Candidate], spec: PlanRequestSpec, budget: float
) -> tuple[list[Candidate], float, str, float]:
    """Greedy from the mechanisms only: most trained first (noise-to-signal ratio, then
    the later checkpoint), each added while the joint release (one profile per verified
    run: its latest checkpoint in the set) stays within ``budget``."""

    def order(c: Candidate) -> tuple[float, int]:
        r = noise_to_signal(c.mechanism)
        return (math.inf if r is None else r, -(c.step or 0))

    chosen: list[Candidate] = []
    eps, used, min_seen = 0.0, "rdp", math.inf
    for c in sorted(keep, key=order):
        trial = [*chosen, c]
        e, acc = joint(spec, [p.profile for p in _representatives(trial)])
        min_seen = min(min_seen, e)
        if e <= budget:
            chosen, eps, used = trial, e, acc
    return chosen, eps, used, min_seen


def _representatives(models: list[Candidate]) -> list[Candidate]:
    """One candidate per verified run (its latest checkpoint), the others alone."""
    runs: dict[str, Candidate] = {}
    alone = []
    for c in models:
        if c.run_id is None or not c.lineage_verified:
            alone.append(c)
        elif c.run_id not in runs or (c.step or 0) > (runs[c.run_id].step or 0):
            runs[c.run_id] = c
    return [*runs.values(), *alone]
