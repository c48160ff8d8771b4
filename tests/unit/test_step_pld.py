"""The merged LC step's PLD from linear bounds on its loss (``step_pld``): never below the
exact hockey-stick curves (computed here independently, by root finding and by
quadrature), tight to about one grid step, and sound under composition against
dp_accounting's optimistic and pessimistic PLDs of the same mixture."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pldlib
from scipy import integrate, optimize, stats

from service.accounting.lc import merged_step
from service.accounting.lc.merged_step import merged_step_mixture
from service.accounting.lc.mixture import Mixture, lc_mixture
from service.accounting.lc.step_pld import step_pld
from service.accounting.pld.gaussian import gaussian_delta
from service.accounting.pld.pair import PldPair, PmfDelta


def _log_m(probs: np.ndarray, shifts: np.ndarray, x: float) -> float:
    terms = np.log(probs) + shifts * x - 0.5 * shifts**2
    top = float(terms.max())
    return top + math.log(float(np.exp(terms - top).sum()))


def exact_deltas(mix: Mixture, eps: float) -> tuple[float, float]:
    """H_{e^eps}(P||Q) and H_{e^eps}(Q||P) of P = sum p_k N(a_k, 1), Q = N(0, 1): the
    optimal tests are half-lines at the root of log M(x) = +-eps (brentq)."""
    p, a = mix.probs, mix.shifts
    gamma = math.exp(eps)

    def remove_at(t: float) -> float:
        return float(np.sum(p * stats.norm.sf(t - a)) - gamma * stats.norm.sf(t))

    def add_at(t: float) -> float:
        return float(stats.norm.cdf(t) - gamma * np.sum(p * stats.norm.cdf(t - a)))

    lo, hi = -40.0, float(a.max()) + 40.0
    out = []
    for level, fn in ((eps, remove_at), (-eps, add_at)):
        f_lo, f_hi = _log_m(p, a, lo) - level, _log_m(p, a, hi) - level
        if f_lo >= 0:
            out.append(max(0.0, fn(lo)))
        elif f_hi <= 0:
            out.append(max(0.0, fn(hi)))
        else:
            root = optimize.brentq(lambda x, lv=level: _log_m(p, a, x) - lv, lo, hi, xtol=1e-14)
            out.append(max(0.0, fn(root)))
    return out[0], out[1]


MIXTURES = [
    lc_mixture([0.01, 0.02, 0.05], [0.4, 0.3, 0.6]),  # small q, mass at 0
    lc_mixture([0.3, 0.5, 0.2, 0.7], [0.2, 0.5, 0.3, 0.1]),
    lc_mixture([1.0, 0.1, 0.2], [0.5, 0.3, 0.4]),  # one run always includes: no mass at 0
    Mixture(np.array([1.0]), np.array([1.3])),  # the Gaussian mechanism
    lc_mixture([0.05] * 8, np.linspace(0.05, 0.6, 8)),
]


@pytest.mark.parametrize("mix", MIXTURES)
@pytest.mark.parametrize("h", [1e-3, 1e-4])
def test_never_below_the_exact_curves_and_within_a_grid_step(mix: Mixture, h: float) -> None:
    pair = step_pld(mix, h)
    for eps in (0.0, 0.01, 0.1, 0.5, 1.0, 2.0, 4.0):
        remove, add = exact_deltas(mix, eps)
        assert pair.delta_remove(eps) >= remove
        assert pair.delta_add(eps) >= add
        # tight: losses are overstated by about a grid step and remove masses by a
        # factor e^(1.2 h), so the curve is below the exact one 3 steps to the left
        # (epsilon at most 3 h above the exact one; delta itself may be several % above
        # where the losses are all small, as on any grid of width h)
        if eps < 3 * h:
            continue
        loose_remove, loose_add = exact_deltas(mix, eps - 3 * h)
        assert pair.delta_remove(eps) <= loose_remove * math.exp(3 * h) + 1e-12
        assert pair.delta_add(eps) <= loose_add + 1e-12


def test_the_root_finding_oracle_agrees_with_quadrature() -> None:
    mix = MIXTURES[1]
    for eps in (0.1, 0.7):
        gamma = math.exp(eps)

        def integrand(x: float, g: float = gamma) -> float:
            p = float(np.sum(mix.probs * stats.norm.pdf(x - mix.shifts)))
            return max(0.0, p - g * stats.norm.pdf(x))

        quad, _ = integrate.quad(integrand, -20, 25, limit=400, epsabs=1e-13)
        assert exact_deltas(mix, eps)[0] == pytest.approx(quad, rel=1e-7, abs=1e-12)


def test_the_gaussian_step_is_the_gaussian_mechanism() -> None:
    mu = 1.3
    pair = step_pld(MIXTURES[3], 1e-4)
    for eps in (0.0, 0.5, 2.0, 5.0):
        assert pair.delta_remove(eps) >= gaussian_delta(mu, eps)
        assert pair.delta_add(eps) >= gaussian_delta(mu, eps)
    for delta in (1e-3, 1e-6, 1e-10):
        exact = optimize.brentq(lambda e, d=delta: gaussian_delta(mu, e) - d, 0.0, 50.0)
        assert exact <= pair.epsilon(delta) <= exact + 3e-4


@pytest.mark.parametrize("mix", MIXTURES[:3])
def test_sound_and_tight_under_composition(mix: Mixture) -> None:
    """Composed 30 times: never below dp_accounting's optimistic PLD of the mixture, and
    above its pessimistic one by at most about a grid step per composition."""
    h, count = 1e-3, 30
    ours = step_pld(mix, h).to_pld().self_compose(count)
    args = (1.0, list(mix.shifts), list(mix.probs))
    pessimistic = pldlib.from_mixture_gaussian_mechanism(
        *args, value_discretization_interval=h
    ).self_compose(count)
    optimistic = pldlib.from_mixture_gaussian_mechanism(
        *args, value_discretization_interval=h, pessimistic_estimate=False, use_connect_dots=False
    ).self_compose(count)
    for delta in (1e-3, 1e-6, 1e-9):
        got = ours.get_epsilon_for_delta(delta)
        assert got >= optimistic.get_epsilon_for_delta(delta)
        assert got <= pessimistic.get_epsilon_for_delta(delta) + 1.5 * h * count


def test_many_runs_dominate_the_exact_enumeration() -> None:
    """12 runs, enumerated exactly (4,096 patterns) and through the convolution (every
    shift rounded up, at most MAX_COMPONENTS kept): never below; within 0.2% at the
    default cap, and still never below when the cap forces a much coarser grid."""
    rng = np.random.default_rng(7)
    q, a = rng.uniform(0.01, 0.2, 12), rng.uniform(0.05, 0.5, 12)
    exact = lc_mixture(q, a)
    e_exact = step_pld(exact, 1e-4).epsilon(1e-6)
    for cap, slack in ((merged_step.MAX_COMPONENTS, 1.002), (64, 1.2)):
        old = merged_step.MAX_COMPONENTS
        merged_step.MAX_COMPONENTS = cap
        try:
            capped = merged_step_mixture(q, a)
        finally:
            merged_step.MAX_COMPONENTS = old
        assert capped.shifts.shape[0] <= cap < exact.shifts.shape[0]
        pair = step_pld(capped, 1e-4)
        for eps in (0.05, 0.3, 1.0, 2.0):
            remove, add = exact_deltas(exact, eps)
            assert pair.delta_remove(eps) >= remove
            assert pair.delta_add(eps) >= add
        assert e_exact <= pair.epsilon(1e-6) <= e_exact * slack


def test_negligible_top_components_become_an_atom_at_infinity() -> None:
    """A component of mass 1e-20 at shift 40 would stretch the loss range to ~800; it is
    replaced by the infinite loss, which only raises the remove curve."""
    mix = Mixture(np.array([0.9, 0.1 - 1e-20, 1e-20]), np.array([0.0, 0.5, 40.0]))
    pair = step_pld(mix, 1e-4)
    assert pair.remove._infinity_mass >= 1e-20
    assert pair.remove._probs.shape[0] < 100_000
    for eps in (0.1, 1.0, 30.0):
        remove, add = exact_deltas(mix, eps)
        assert pair.delta_remove(eps) >= remove
        assert pair.delta_add(eps) >= add


def test_pmf_deltas_raise_negative_masses_to_zero() -> None:
    """FFT compositions leave masses of about -1e-18; the vectorised and scalar deltas
    are never below the sum with those masses raised to 0."""
    probs = np.array([0.5, 0.3, -1e-15, 0.2 - 1e-14, 2e-15, -3e-15, 1e-15])
    pmf = pld_pmf.DensePLDPmf(0.5, 0, probs, 1e-16, True)
    table = PmfDelta(pmf)
    losses = np.arange(probs.shape[0]) * 0.5
    clipped = np.maximum(probs, 0)
    for eps in (0.0, 0.7, 1.3, 2.2, 2.6, 2.9):
        direct = float(np.sum(clipped * np.maximum(0.0, -np.expm1(eps - losses)))) + 1e-16
        assert table(eps) >= direct
        assert table.many(np.array([eps]))[0] >= direct
    pair = PldPair(remove=pmf, add=pmf)
    grid = np.linspace(0, 3, 31)
    remove, _ = pair.deltas(grid)
    assert np.all(remove >= np.array([table(e) for e in grid]) * (1 - 1e-15))


def test_a_component_of_zero_mass_changes_nothing() -> None:
    with np.errstate(divide="ignore"):
        padded = step_pld(Mixture(np.array([0.0, 0.5, 0.5]), np.array([0.0, 0.3, 0.6])), 1e-4)
    plain = step_pld(Mixture(np.array([0.5, 0.5]), np.array([0.3, 0.6])), 1e-4)
    for delta in (1e-3, 1e-6):
        assert padded.epsilon(delta) == pytest.approx(plain.epsilon(delta), rel=1e-12)
