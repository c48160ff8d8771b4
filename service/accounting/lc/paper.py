"""The paper's per-step LC composition, kept only as a labelled comparison.

Source: Section 6 of "Differentially Private Model Merging" (arXiv:2604.20985) (Theorems 6.2 and
6.4,
Algorithms 3 and 4): every merged step is the 1-D Gaussian mixture of
``mixture.py`` and ``mixture_pld.py``, steps aligned across models (runs of unequal
length padded with virtual steps: q = 0, no noise) and composed.

NOT A GUARANTEE for multi-step mechanisms. The argument treats each step's
gradient as fixed; in DP-SGD later gradients depend on each run's hidden earlier
iterates, which the data-independent part of a gradient can carry into the final
weights (2 runs, q = 1, sigma = 2, T = 2, weights 0.9/0.1: exact epsilon 3.862 at
delta 1e-5, this composition 3.295). The service shows it as ``paper_epsilon``
beside the sound bound of ``lc.accountant``, "holds only if gradients do not
depend on hidden state", and never uses it for a plan, a release, the ledger or a cap.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from service.accounting.conversions import ORDERS, eps_from_rdp
from service.accounting.lc.mixture import lc_mixture, mixture_rdp
from service.accounting.lc.mixture_pld import mixture_pld
from service.accounting.mechanisms import DPSGD, Gaussian, Mechanism
from service.accounting.pld.gaussian import gaussian_epsilon
from service.accounting.pld.pair import PldPair
from service.accounting.profiles.profile import RDP_SAFETY
from service.errors import Unsupported

#: Optimizers Theorem 6.2 covers: the update is lr * (clipped gradient + noise).
LC_OPTIMIZERS = ("sgd",)


@dataclass(frozen=True)
class StepParams:
    """One DP-SGD step of one model: sampling rate, noise multiplier, clipping norm, lr."""

    q: float
    sigma: float
    clip: float
    lr: float


@dataclass(frozen=True)
class LCStructure:
    """A model's run as (steps, StepParams) segments, in training order."""

    segments: tuple[tuple[int, StepParams], ...]
    heuristic: bool = False

    @property
    def steps(self) -> int:
        return sum(n for n, _ in self.segments)


def lc_structure(mechanism: Mechanism) -> LCStructure | None:
    """The DP-SGD structure LC accounting needs, or None when there is none to use.

    Raises ``Unsupported`` when the mechanism is DP-SGD but the analysis cannot
    cover it (an adaptive optimizer, no learning rate). ``gaussian`` is the mean
    estimation case (section 4.1): count steps with q = 1, lr = 1, C = sensitivity.
    """
    if isinstance(mechanism, Gaussian):
        return LCStructure(
            ((mechanism.count, StepParams(1.0, mechanism.sigma, mechanism.sensitivity, 1.0)),)
        )
    if not isinstance(mechanism, DPSGD):
        return None
    if mechanism.optimizer not in LC_OPTIMIZERS:
        raise Unsupported(
            f"optimizer {mechanism.optimizer!r}: linear-combination accounting (Theorem 6.2) "
            "covers plain SGD only; random selection still applies"
        )
    segments = []
    for seg in mechanism.segments():
        if seg.groups is not None:
            return None  # per-group clipping: no 1-D reduction, joint release instead
        if seg.learning_rate is None:
            raise Unsupported(
                "linear-combination accounting needs each step's learning_rate "
                "(the merged update weighs models by lambda * lr * C)"
            )
        assert seg.noise_multiplier is not None and seg.clipping_norm is not None
        segments.append(
            (
                seg.steps,
                StepParams(
                    seg.sampling_rate, seg.noise_multiplier, seg.clipping_norm, seg.learning_rate
                ),
            )
        )
    return LCStructure(tuple(segments), heuristic=mechanism.heuristic)


_VIRTUAL = StepParams(0.0, 0.0, 0.0, 0.0)


def joint_steps(structures: list[LCStructure]) -> list[tuple[int, tuple[StepParams, ...]]]:
    """Distinct joint steps (one StepParams per model) and how often each occurs.

    Runs are aligned step by step; a model past its last step contributes a virtual
    step (q = 0, no noise). Composition is commutative, so equal joint steps are
    counted together wherever they occur.
    """
    total = max(s.steps for s in structures)
    bounds = {0, total}
    for s in structures:
        pos = 0
        for n, _ in s.segments:
            pos += n
            bounds.add(pos)
    cuts = sorted(bounds)
    counts: dict[tuple[StepParams, ...], int] = {}
    for start, stop in itertools.pairwise(cuts):
        key = tuple(_params_at(s, start) for s in structures)
        counts[key] = counts.get(key, 0) + (stop - start)
    return [(n, key) for key, n in counts.items()]


def _params_at(structure: LCStructure, step: int) -> StepParams:
    pos = 0
    for n, params in structure.segments:
        if step < pos + n:
            return params
        pos += n
    return _VIRTUAL


def _step_mixture_inputs(params: tuple[StepParams, ...], lam: NDArray) -> tuple[NDArray, NDArray]:
    """(q, a) of one merged step: a_i = lambda_i lr_i C_i / s, s^2 = sum (lambda lr sigma C)^2."""
    q = np.array([p.q for p in params])
    w = np.array([lam[i] * p.lr * p.clip for i, p in enumerate(params)])
    noise = np.array([lam[i] * p.lr * p.sigma * p.clip for i, p in enumerate(params)])
    s = math.sqrt(float(np.sum(noise**2)))
    active = (q > 0) & (w > 0)
    if not np.any(active):
        return np.zeros(0), np.zeros(0)
    if s == 0:
        raise Unsupported("a merged step has no noise: its privacy loss is unbounded")
    return q[active], w[active] / s


def lc_rdp(
    structures: list[LCStructure], lam: NDArray, orders: NDArray = ORDERS
) -> NDArray[np.float64]:
    """Algorithm 3 (Theorem 6.2 summed over steps), both directions: each direction's
    per-step divergences are summed and the larger total is kept (with the profiles'
    rounding margin)."""
    forward = np.zeros(orders.shape)
    reverse = np.zeros(orders.shape)
    for count, params in joint_steps(structures):
        q, a = _step_mixture_inputs(params, lam)
        if q.shape[0] == 0:
            continue
        f, r = mixture_rdp(lc_mixture(q, a), orders)
        forward += count * f
        reverse += count * r
    return np.maximum(forward, reverse) * (1.0 + RDP_SAFETY)


def lc_rdp_epsilon(structures: list[LCStructure], lam: NDArray, delta: float) -> float:
    return eps_from_rdp(ORDERS, lc_rdp(structures, lam), delta)


def lc_pld(structures: list[LCStructure], lam: NDArray, discretization: float) -> PldPair:
    """Algorithm 4 (Theorem 6.4 and Corollary 6.5): per distinct joint step the surrogate
    mixture PLD, self-composed by FFT as often as it occurs, then composed."""
    total = None
    for count, params in joint_steps(structures):
        q, a = _step_mixture_inputs(params, lam)
        if q.shape[0] == 0:
            continue
        pld = mixture_pld(lc_mixture(q, a), discretization).self_compose(count)
        total = pld if total is None else total.compose(pld)
    if total is None:
        from dp_accounting.pld import privacy_loss_distribution as pldlib

        total = pldlib.identity(discretization)
    return PldPair.from_pld(total)


def lc_pld_epsilon(
    structures: list[LCStructure], lam: NDArray, delta: float, discretization: float
) -> float:
    """Algorithm 4's epsilon. When every merged step is one Gaussian (q = 1 for all models,
    the mean-estimation case) their composition is the Gaussian N(mu, 1) with
    mu^2 = sum count * A^2, whose curve is exact (no discretisation needed)."""
    mu_sq = 0.0
    for count, params in joint_steps(structures):
        q, a = _step_mixture_inputs(params, lam)
        if q.shape[0] == 0:
            continue
        if np.any(q < 1.0):
            return lc_pld(structures, lam, discretization).epsilon(delta)
        mu_sq += count * float(np.sum(a)) ** 2
    return gaussian_epsilon(math.sqrt(mu_sq), delta)


#: Most models the comparison is computed for (it enumerates inclusion patterns).
PAPER_MAX_MODELS = 12


def paper_epsilon(mechanisms: list[Mechanism], lam: NDArray, delta: float) -> float | None:
    """The paper's composition as printed (Algorithm 3, RDP) for the weights ``lam``, for
    display beside the sound bound; None where the paper's analysis does not even claim
    to apply (no DP-SGD or Gaussian structure, an adaptive optimizer, too many models)."""
    if len(mechanisms) > PAPER_MAX_MODELS:
        return None
    try:
        structures = [lc_structure(m) for m in mechanisms]
    except Unsupported:
        return None
    if any(s is None for s in structures):
        return None
    return lc_rdp_epsilon([s for s in structures if s is not None], lam, delta)
