"""Linear combination (LC): what releasing theta = sum_i lambda_i theta_i proves.

The rule (ARCHITECTURE.md, "LC: what is true"). For independent runs,

    theta = sum_i lambda_i theta_i' - sum_i lambda_i c_i (G_i + sigma_i C_i Z_i)

where theta_i' is run i's iterate before its last update, G_i that update's sum of
clipped gradients and c_i its coefficient in the update (the last step's learning
rate; eta (1 - dampening) with momentum, eta (1 + beta) with Nesterov: the earlier
velocity is a function of earlier iterates). So theta is a post-processing of
  (a) every run's first T_i - 1 steps, released jointly (independent runs compose), and
  (b) one merged step Y = sum_i lambda_i c_i (G_i + sigma_i C_i Z_i).
Given everything in (a), each run includes the differing example in its last batch
independently with q_i, adding a vector of norm <= lambda_i c_i C_i to Y, and the
noise is N(0, s^2 I) with s^2 = sum_i (lambda_i c_i sigma_i C_i)^2. A mixture of
Gaussians with vector shifts is dominated by the scalar mixture with the norms added
on one axis (Choquette-Choo et al., arXiv 2310.15526, Corollary 4.7), and the privacy
profile grows with each shift (merged_step.py), so (b) is dominated, for every history,
by the mixture of ``merged_step_mixture`` with a_i = lambda_i c_i C_i / s: Theorem 6.2
and Lemma 6.3 of "Differentially Private Model Merging" (arXiv:2604.20985) for one step. The
certificate is the
adaptive composition of (a) and (b): RDP adds; dominating pairs compose (Zhu, Dong and
Wang 2022). The paper's per-step composition (``lc.paper``) is NOT used: it treats
later gradients as fixed, which hidden iterates break.

An input whose last update is not linear in a noisy gradient (Adam, adaptive Gaussian
queries that are not accumulated additively, a mechanism known only by its curves)
puts its whole mechanism into (a) and nothing into (b): for such sets the bound is the
joint release (Theorem 6.1). Per-group clipping: the noise of group g has std
c sigma_g C_g; a covariance that dominates s_min^2 I is a post-processing of the
isotropic one (add the rest), so the noise is taken as c min_g sigma_g C_g in every
coordinate and the shift as c sqrt(sum_g C_g^2).

Fixed queries (``gaussian`` with count 1 or ``adaptive: false``, Section 4.1): when every
merged model is such a release the merged output is exactly Gaussian: query j has shift
sum_i lambda_i Delta_i [j < k_i] and variance sum_i lambda_i^2 std_i^2 [j < k_i], so
mu^2 = sum_j shift_j^2 / variance_j, exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from service.accounting.conversions import ORDERS, eps_from_rdp
from service.accounting.lc.merged_step import merged_step_mixture
from service.accounting.lc.mixture import Mixture, mixture_rdp
from service.accounting.lc.step_pld import step_pld
from service.accounting.mechanisms import DPSGD, Gaussian, Mechanism, NonPrivate, Segment
from service.accounting.pld.gaussian import gaussian_epsilon
from service.accounting.pld.pair import DEFAULT_DISCRETIZATION, PldPair
from service.accounting.profiles.profile import RDP_SAFETY, PrivacyProfile, compute_profile
from service.accounting.rdp.orders import epsilon_any_order
from service.errors import Unsupported

#: What every LC certificate assumes; shown wherever the bound is shown.
ASSUMPTIONS: tuple[str, ...] = (
    "runs with different lineage run ids (or none) used independent randomness: "
    "sampling masks and noise",
    "each run's step count and learning-rate schedule were fixed in advance (early "
    "stopping or reduce-on-plateau driven by private data is not covered)",
    "the weights were chosen without reading the models' outputs on private data",
)


@dataclass(frozen=True)
class FinalStep:
    """A model's last noisy update as it enters its weights, per unit of lambda:
    inclusion probability, largest norm of one example's contribution (c C), and a
    lower bound on the noise std in every coordinate (c sigma C)."""

    q: float
    shift: float
    noise: float


@dataclass(frozen=True)
class LCInput:
    """One model as LC accounting sees it: ``released`` is composed jointly (the part
    before the final step, or the whole model when ``final`` is None)."""

    released: Mechanism | None
    final: FinalStep | None
    fixed_queries: int = 0
    heuristic: bool = False
    note: str | None = None


def lc_input(mechanism: Mechanism) -> LCInput:
    """How ``mechanism`` enters an LC certificate. ``Unsupported`` for a non-private model."""
    if isinstance(mechanism, NonPrivate):
        raise Unsupported("a non-private model has no guarantee to combine")
    if isinstance(mechanism, Gaussian):
        return _gaussian_input(mechanism)
    if isinstance(mechanism, DPSGD):
        return _dp_sgd_input(mechanism)
    if mechanism.type == "dp_event":
        return LCInput(
            released=mechanism,
            final=None,
            note="dp_event: a DpEvent names no learning rate or clipping norm, so its last "
            "update cannot be weighed: accounted as its joint release",
        )
    return LCInput(
        released=mechanism,
        final=None,
        note=f"{mechanism.type}: no final update to merge, accounted as its joint release",
    )


def _gaussian_input(m: Gaussian) -> LCInput:
    final = FinalStep(1.0, m.sensitivity, m.std)
    rest = m.model_copy(update={"count": m.count - 1}) if m.count > 1 else None
    if m.count == 1 or not m.adaptive:
        return LCInput(released=rest, final=final, fixed_queries=m.count)
    if m.additive:
        return LCInput(released=rest, final=final)
    return LCInput(
        released=m,
        final=None,
        note="adaptive Gaussian queries not accumulated additively: joint release",
    )


def _dp_sgd_input(m: DPSGD) -> LCInput:
    segments = m.segments()
    last = segments[-1]
    coef, why = _last_gradient_coefficient(m, last)
    if coef is None:
        return LCInput(released=m, final=None, heuristic=m.heuristic, note=why)
    if last.groups is None:
        assert last.noise_multiplier is not None and last.clipping_norm is not None
        noise = last.noise_multiplier * last.clipping_norm
    else:
        noise = min(g.noise_multiplier * g.clipping_norm for g in last.groups)
    final = FinalStep(last.sampling_rate, coef * last.total_clipping_norm, coef * noise)
    return LCInput(released=without_last_step(m), final=final, heuristic=m.heuristic)


def _last_gradient_coefficient(m: DPSGD, last: Segment) -> tuple[float | None, str | None]:
    if m.optimizer not in ("sgd", "sgd_momentum"):
        return None, (
            f"optimizer {m.optimizer!r}: the last gradient enters the weights non-linearly, "
            "accounted as the joint release"
        )
    if last.learning_rate is None:
        return None, "no learning_rate at the last step: accounted as the joint release"
    if m.optimizer == "sgd":
        return last.learning_rate, None
    if m.momentum is None:
        return None, "momentum SGD without its momentum value: accounted as the joint release"
    if m.nesterov:
        return last.learning_rate * (1.0 + m.momentum), None
    # PyTorch keeps no buffer when momentum is 0, and starts the buffer with the first
    # gradient undamped (v_1 = g_1): dampening weighs only the gradients after it.
    if m.momentum == 0 or m.total_steps == 1:
        return last.learning_rate, None
    return last.learning_rate * (1.0 - m.dampening), None


def without_last_step(m: DPSGD) -> DPSGD | None:
    """The run's first T - 1 steps (None for a one-step run)."""
    segments = m.segments()
    last = segments[-1]
    head = segments[:-1] + ([last.model_copy(update={"steps": last.steps - 1})] * (last.steps > 1))
    if not head:
        return None
    fields = m.model_dump(include={"sampling", "accept_poisson_approximation", "optimizer"})
    fields.update(m.model_dump(include={"momentum", "dampening", "nesterov"}))
    return DPSGD(type="dp_sgd", schedule=head, **fields)


def gdp_mu(mechanism: Mechanism | None) -> float | None:
    """mu when the mechanism is exactly a composition of Gaussian mechanisms (mu-GDP);
    None otherwise. DP-SGD with q = 1 everywhere, and Gaussian releases."""
    if mechanism is None:
        return 0.0
    if isinstance(mechanism, Gaussian):
        return math.sqrt(mechanism.count) / mechanism.sigma
    if isinstance(mechanism, DPSGD):
        segs = mechanism.segments()
        if mechanism.heuristic or any(s.sampling_rate < 1.0 for s in segs):
            return None
        return math.sqrt(sum(s.steps / s.effective_noise_multiplier**2 for s in segs))
    return None


@dataclass
class LCAccountant:
    """The LC certificate of a fixed set of inputs for any weights on them.

    ``released`` holds the profile of each input's ``released`` mechanism (None where
    there is none); part (a) does not depend on the weights and is composed once.
    """

    inputs: list[LCInput]
    released: list[PrivacyProfile | None]
    delta: float
    discretization: float = DEFAULT_DISCRETIZATION
    _cache: dict[str, object] = field(default_factory=dict, repr=False)
    _epsilons: dict[tuple[bytes, str], float] = field(default_factory=dict, repr=False)

    @property
    def heuristic(self) -> bool:
        return any(i.heuristic for i in self.inputs) or any(
            p is not None and p.heuristic for p in self.released
        )

    @property
    def uses_final_step(self) -> bool:
        return any(i.final is not None for i in self.inputs)

    def epsilon(self, lam: NDArray, accountant: str) -> float:
        """Epsilon at ``delta`` under 'rdp' or 'pld' for weights ``lam`` (>= 0); each
        (weights, accountant) is computed once (searches and certificates revisit)."""
        lam = np.asarray(lam, dtype=np.float64)
        key = (lam.tobytes(), accountant)
        seen = self._epsilons.get(key)
        if seen is None:
            seen = self._epsilons[key] = self._epsilon(lam, accountant)
        return seen

    def _epsilon(self, lam: NDArray, accountant: str) -> float:
        mu = self._gdp(lam)
        if mu is not None:
            if accountant == "rdp":
                return epsilon_any_order(lambda a: a * mu * mu / 2.0, self.delta)
            return gaussian_epsilon(mu, self.delta)
        if accountant == "rdp" or not self._has_pld():
            return eps_from_rdp(ORDERS, self._joint_rdp() + self._step_rdp(lam), self.delta)
        return self._pld_epsilon(lam)

    def certify(self, lam: NDArray, accountant: str) -> float:
        """The epsilon to report for weights ``lam``: ``epsilon``, and under RDP also the
        best real order (no fixed grid), whichever is smaller. Both are valid bounds:
        the RDP composition holds at every order. Slower than ``epsilon`` (which plan
        searches call many times), so it is for the final answer."""
        eps = self.epsilon(lam, accountant)
        lam = np.asarray(lam, dtype=np.float64)
        if self._gdp(lam) is not None or not (accountant == "rdp" or not self._has_pld()):
            return eps
        mix = self._step_mixture(lam)

        def rdp_at(orders: NDArray) -> NDArray:
            total = np.zeros(orders.shape)
            for p in self.released:
                if p is not None:
                    total = total + p.rdp_at(orders)
            if mix is not None:
                forward, reverse = mixture_rdp(mix, orders)
                total = total + np.maximum(forward, reverse) * (1.0 + RDP_SAFETY)
            return total

        return min(eps, epsilon_any_order(rdp_at, self.delta))

    def joint_epsilon(self, accountant: str) -> float:
        """Epsilon of part (a) alone: a lower bound on every certificate of this set."""
        return self.epsilon(np.zeros(len(self.inputs)), accountant)

    # ---- part (b): the merged final step --------------------------------------

    def _finals(self, lam: NDArray) -> tuple[NDArray, NDArray, NDArray]:
        q, shift, noise = [], [], []
        for w, inp in zip(lam, self.inputs, strict=True):
            if inp.final is not None and w > 0:
                q.append(inp.final.q)
                shift.append(w * inp.final.shift)
                noise.append(w * inp.final.noise)
        return np.array(q), np.array(shift), np.array(noise)

    def _step_mixture(self, lam: NDArray) -> Mixture | None:
        q, shift, noise = self._finals(lam)
        if q.shape[0] == 0:
            return None
        s = math.sqrt(float(np.sum(noise**2)))
        return merged_step_mixture(q, shift / s)

    def _step_rdp(self, lam: NDArray) -> NDArray:
        mix = self._step_mixture(lam)
        if mix is None:
            return np.zeros(ORDERS.shape)
        forward, reverse = mixture_rdp(mix, ORDERS)
        return np.maximum(forward, reverse) * (1.0 + RDP_SAFETY)

    # ---- part (a) and the composition -----------------------------------------

    def _joint_rdp(self) -> NDArray:
        if "rdp" not in self._cache:
            total = np.zeros(ORDERS.shape)
            for p in self.released:
                if p is not None:
                    total = total + p.rdp_at(ORDERS)
            self._cache["rdp"] = total
        return self._cache["rdp"]  # type: ignore[return-value]

    def _has_pld(self) -> bool:
        return all(p is None or p.pld is not None for p in self.released)

    def _joint_pld(self) -> PldPair | None:
        if "pld" not in self._cache:
            pair: PldPair | None = None
            for p in self.released:
                if p is not None and p.pld is not None:
                    pair = p.pld if pair is None else pair.compose(p.pld)
            self._cache["pld"] = pair
        return self._cache["pld"]  # type: ignore[return-value]

    def _pld_epsilon(self, lam: NDArray) -> float:
        joint = self._joint_pld()
        mix = self._step_mixture(lam)
        if mix is None:
            return joint.epsilon(self.delta) if joint is not None else 0.0
        disc = joint.discretization if joint is not None else self.discretization
        step = step_pld(mix, disc)
        total = step if joint is None else joint.compose(step)
        return total.epsilon(self.delta)

    def _gdp(self, lam: NDArray) -> float | None:
        """mu when the whole certificate is exactly Gaussian (fixed queries, or every
        part a Gaussian mechanism and every final step taken with q = 1)."""
        if all(i.fixed_queries > 0 for i in self.inputs):
            return fixed_queries_mu(self.inputs, lam)
        mus = [gdp_mu(i.released) for i in self.inputs]
        if any(m is None for m in mus):
            return None
        q, shift, noise = self._finals(lam)
        if np.any(q < 1.0):
            return None
        total = sum(m * m for m in mus if m is not None)
        if q.shape[0]:
            total += float(shift.sum()) ** 2 / float(np.sum(noise**2))
        return math.sqrt(total)


def fixed_queries_mu(inputs: list[LCInput], lam: NDArray) -> float:
    counts = sorted({i.fixed_queries for i in inputs})
    total, previous = 0.0, 0
    for k in counts:
        live = [(w, i.final) for w, i in zip(lam, inputs, strict=True) if i.fixed_queries >= k]
        shift = sum(w * f.shift for w, f in live if f is not None and w > 0)
        var = sum((w * f.noise) ** 2 for w, f in live if f is not None and w > 0)
        if shift > 0:
            total += (k - previous) * shift * shift / var
        previous = k
    return math.sqrt(total)


def released_profile(inp: LCInput, full: PrivacyProfile) -> PrivacyProfile | None:
    """The profile of ``inp.released``: the model's own when it is the whole model,
    otherwise computed here (callers that cache profiles pass their own instead)."""
    if inp.released is None:
        return None
    if inp.final is None:
        return full
    disc = float(full.parameters.get("discretization", DEFAULT_DISCRETIZATION))
    return compute_profile(inp.released, discretization=disc)


# ---- Theorem 6.1: the joint release ---------------------------------------------


def joint_rdp(profiles: list[PrivacyProfile], orders: NDArray = ORDERS) -> NDArray:
    """Theorem 6.1 (1): RDP of the joint release is the sum of the models' RDP."""
    return np.sum([p.rdp_at(orders) for p in profiles], axis=0)


def joint_epsilon(profiles: list[PrivacyProfile], delta: float, accountant: str) -> float:
    """Theorem 6.1: epsilon of releasing all ``profiles`` together (independent runs).

    RDP: sum of curves. PLD: composition of PLDs, when every model has one; otherwise
    the RDP route (the PLD accountant then equals the RDP one, said in the notes).
    """
    rdp_eps = epsilon_any_order(lambda a: joint_rdp(profiles, a), delta)
    if accountant == "rdp":
        return rdp_eps
    if any(p.non_private for p in profiles):
        return math.inf
    if all(p.pld is not None for p in profiles):
        pair = profiles[0].pld
        assert pair is not None
        for p in profiles[1:]:
            assert p.pld is not None
            pair = pair.compose(p.pld)
        pld_eps = pair.epsilon(delta)
    else:
        pld_eps = rdp_eps
    return pld_eps if accountant == "pld" else min(pld_eps, rdp_eps)
