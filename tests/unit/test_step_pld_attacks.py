"""Adversarial checks of the merged step's PLD (``step_pld``), the merged-step mixture,
PMF deltas and the accounting memos, each against an oracle written here:

  * exact hockey-stick curves of one step (the optimal tests are half-lines at the roots
    of log M(x) = +-eps, found by brentq; the masses are normal tails), and mpmath at 50
    digits for a far tail;
  * an optimistic PLD (every loss rounded DOWN onto a finer grid, masses exact from the
    inverse of the increasing loss) composed by FFT: a lower bound on every composed
    delta that shares no code with the product;
  * dp_accounting's optimistic mixture PLD for one step (under many-fold composition it
    is not a lower bound for some mixtures: it was seen above an RDP upper bound).

Inputs: huge shifts, tiny shifts, q near 0 and 1, no mass at shift 0, one dominant
tiny-probability large component, nearly equal shifts, widths 1e-5 to 1e-2, eps 0 to 50,
coarse grids capped far below their default size, and loss values perturbed within the
margin the proof allows (non-monotone coarse values).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pldlib
from scipy import optimize, special

from service.accounting.lc import accountant as lc
from service.accounting.lc import merged_step
from service.accounting.lc import step_pld as step_module
from service.accounting.lc.merged_step import merged_step_mixture
from service.accounting.lc.mixture import Mixture, lc_mixture
from service.accounting.lc.step_pld import step_pld
from service.accounting.mechanisms import parse_mechanism
from service.accounting.pld.pair import PldPair, PmfDelta
from service.accounting.profiles.profile import compute_profile
from service.accounting.rdp.profile import RdpProfile
from service.accounting.rs import bounds as rs
from tests.helpers import sgd

EPS = [0.0, 1e-4, 0.01, 0.1, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0, 30.0, 50.0]


# ---- oracles ------------------------------------------------------------------------


def _log_m(p: np.ndarray, a: np.ndarray, x: np.ndarray) -> np.ndarray:
    terms = np.log(p)[:, None] + np.multiply.outer(a, x) - 0.5 * (a * a)[:, None]
    return np.asarray(special.logsumexp(terms, axis=0))


def exact(p: np.ndarray, a: np.ndarray, eps: float) -> tuple[float, float, float]:
    """(H_{e^eps}(P||Q), H_{e^eps}(Q||P), absolute rounding scale of both)."""
    g = math.exp(eps)
    lo, hi = -60.0, float(a.max()) + 60.0
    out, scale = [], 0.0
    for level in (eps, -eps):

        def f(x: float, lv: float = level) -> float:
            return float(_log_m(p, a, np.array([x]))[0]) - lv

        if f(lo) >= 0:
            t = lo
        elif f(hi) <= 0:
            t = hi
        else:
            t = optimize.brentq(f, lo, hi, xtol=1e-14, maxiter=500)
        if level >= 0:
            first, second = float(np.sum(p * special.ndtr(a - t))), g * float(special.ndtr(-t))
        else:
            first, second = float(special.ndtr(t)), g * float(np.sum(p * special.ndtr(t - a)))
        out.append(max(0.0, first - second))
        scale = max(scale, 1e-14 * (first + second))
    return out[0], out[1], scale


def lower_pmfs(p: np.ndarray, a: np.ndarray, h: float) -> tuple[np.ndarray, int, np.ndarray, int]:
    """Optimistic PMFs of one step (remove probs, first level, add probs, first level):
    the loss rounded down onto k h, masses of the x-intervals between the roots of
    L(x) = k h (vectorised bisection)."""
    lmin = float(_log_m(p, a, np.array([-12.0]))[0])
    lmax = float(_log_m(p, a, np.array([float(a.max()) + 12.0]))[0])
    ks = np.arange(math.floor(lmin / h), math.ceil(lmax / h) + 1)
    left = np.full(ks.shape, -60.0)
    right = np.full(ks.shape, float(a.max()) + 60.0)
    for _ in range(64):
        mid = 0.5 * (left + right)
        below = _log_m(p, a, mid) < ks * h
        left, right = np.where(below, mid, left), np.where(below, right, mid)
    xs = 0.5 * (left + right)
    cdf_p = special.ndtr(np.subtract.outer(xs, a)) @ p
    remove = np.append(np.diff(cdf_p), 1.0 - cdf_p[-1])  # L in [k h, (k+1) h) -> k
    cdf_q = special.ndtr(xs)
    # L in [k_i h, k_(i+1) h) <=> -L in (-k_(i+1) h, -k_i h]: level -k_(i+1)
    add = np.concatenate([[cdf_q[0]], np.diff(cdf_q)])[::-1]
    return np.maximum(remove, 0.0), int(ks[0]), np.maximum(add, 0.0), int(-ks[-1])


def fft_compose(pmfs: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """The convolution of each PMF with itself ``count`` times, all together."""
    size = sum((q.shape[0] - 1) * count for q, count in pmfs) + 1
    nfft = 1 << math.ceil(math.log2(size))
    spectrum = np.ones(nfft // 2 + 1, dtype=complex)
    for q, count in pmfs:
        spectrum *= np.fft.rfft(q, nfft) ** count
    return np.maximum(np.fft.irfft(spectrum, nfft)[:size], 0.0)


def pmf_delta(probs: np.ndarray, first: int, h: float, eps: float) -> float:
    losses = (first + np.arange(probs.shape[0])) * h
    above = losses > eps
    return float(np.sum(probs[above] * -np.expm1(eps - losses[above])))


def lower_composed(parts: list[tuple[Mixture, int]], h: float) -> tuple[tuple, tuple]:
    """((remove probs, first), (add probs, first)) of the composition of every step."""
    rem, add, r0, a0 = [], [], 0, 0
    for mix, count in parts:
        r, rl, ad, al = lower_pmfs(mix.probs, mix.shifts, h)
        rem.append((r, count))
        add.append((ad, count))
        r0, a0 = r0 + rl * count, a0 + al * count
    return (fft_compose(rem), r0), (fft_compose(add), a0)


def _assert_above_exact(pair: PldPair, mix: Mixture, epsilons: list[float] = EPS) -> None:
    for eps in epsilons:
        remove, add, scale = exact(mix.probs, mix.shifts, eps)
        assert pair.delta_remove(eps) >= remove - scale, (eps, pair.delta_remove(eps), remove)
        assert pair.delta_add(eps) >= add - scale, (eps, pair.delta_add(eps), add)


# ---- one step against the exact curves ------------------------------------------------

ADVERSARIAL = [
    (Mixture(np.array([0.5, 0.5]), np.array([0.0, 25.0])), 1e-2),  # huge shift
    (Mixture(np.array([1.0]), np.array([20.0])), 1e-2),  # a Gaussian of mu 20
    (Mixture(np.array([1 - 1e-12, 1e-12]), np.array([0.0, 18.0])), 1e-3),  # dominant tail
    (Mixture(np.array([0.3, 0.7 - 1e-9, 1e-9]), np.array([0.0, 0.2, 12.0])), 1e-3),
    (Mixture(np.array([0.5, 0.5]), np.array([0.0, 1e-6])), 1e-5),  # tiny shift
    (Mixture(np.array([0.2, 0.8]), np.array([1e-6, 2e-6])), 1e-4),  # tiny, no mass at 0
    (lc_mixture([1e-12, 1e-9, 1e-6], [8.0, 5.0, 3.0]), 1e-4),  # q close to 0
    (lc_mixture([1 - 1e-12, 1 - 1e-6, 0.999], [0.3, 0.5, 0.2]), 1e-4),  # q close to 1
    (lc_mixture([1.0, 0.3, 0.2], [0.5, 0.3, 0.4]), 1e-5),  # no mass at 0, finest grid
    (Mixture(np.full(200, 1 / 200), 3.0 + np.linspace(0, 1e-7, 200)), 1e-3),  # near-equal
    (Mixture(np.array([0.2, 0.8]), np.array([3.0, 3.0 + 1e-12])), 1e-2),
    (lc_mixture([0.05] * 8, np.linspace(0.05, 0.6, 8)), 1e-2),  # 93 components
]


@pytest.mark.parametrize(("mix", "h"), ADVERSARIAL)
def test_adversarial_steps_never_below_the_exact_curves(mix: Mixture, h: float) -> None:
    _assert_above_exact(step_pld(mix, h), mix)


def test_random_mixtures_never_below_the_exact_curves() -> None:
    rng = np.random.default_rng(11)
    for _ in range(25):
        n = int(rng.integers(2, 30))
        probs = rng.dirichlet(np.full(n, 0.3)) + 1e-300
        shifts = np.sort(rng.uniform(0, rng.choice([0.01, 1.0, 5.0]), n))
        if rng.random() < 0.5:
            shifts[0] = 0.0
        mix = Mixture(probs / probs.sum(), shifts)
        _assert_above_exact(step_pld(mix, float(10 ** rng.uniform(-4, -2))), mix, EPS[::2])


def test_a_far_tail_against_mpmath() -> None:
    """delta ~ 1e-12 at eps = 30 from a component of mass 1e-10 at shift 20 (50 digits)."""
    mix = Mixture(np.array([1 - 1e-10, 1e-10]), np.array([0.0, 20.0]))
    pair = step_pld(mix, 1e-3)
    mpmath.mp.dps = 50
    p = [mpmath.mpf(1) - mpmath.mpf("1e-10"), mpmath.mpf("1e-10")]
    a = [mpmath.mpf(0), mpmath.mpf(20)]
    for eps in (10, 30):

        def loss(x: mpmath.mpf, e: int = eps) -> mpmath.mpf:
            terms = (pk * mpmath.exp(ak * x - ak**2 / 2) for pk, ak in zip(p, a, strict=True))
            return mpmath.log(sum(terms)) - e

        t = mpmath.findroot(loss, 12)
        tail = sum(pk * mpmath.ncdf(ak - t) for pk, ak in zip(p, a, strict=True))
        truth = float(tail - mpmath.exp(eps) * mpmath.ncdf(-t))
        assert truth > 1e-13
        assert pair.delta_remove(float(eps)) >= truth
        assert pair.delta_remove(float(eps)) <= truth * math.exp(0.01) + 1e-13


@pytest.mark.parametrize("cells", [16, 200])
def test_a_coarse_grid_capped_far_below_its_size_stays_sound(
    cells: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MAX_CELLS only trades tightness: cells of width ~3 on a loss of curvature ~10."""
    monkeypatch.setattr(step_module, "MAX_CELLS", cells)
    for mix in (
        lc_mixture([0.3, 0.1, 0.05], [2.0, 4.0, 6.0]),
        Mixture(np.array([1 - 1e-8, 1e-8]), np.array([0.0, 9.0])),
    ):
        _assert_above_exact(step_pld(mix, 1e-3), mix)


@pytest.mark.parametrize("pattern", ["alternate", "random"])
def test_loss_values_off_by_up_to_the_margin_stay_sound(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof allows each computed L(x_i) to be off by < MARGIN. Values pushed there on
    purpose (alternating signs: non-monotone coarse values on flat losses, and secant
    slopes as wrong as they can be) keep both curves above the exact ones."""
    rng = np.random.default_rng(3)
    real = step_module.log_m

    def perturbed(mix: Mixture, x: np.ndarray) -> np.ndarray:
        if pattern == "alternate":
            noise = np.where(np.arange(x.shape[0]) % 2 == 0, 1.0, -1.0)
        else:
            noise = rng.uniform(-1.0, 1.0, x.shape[0])
        return real(mix, x) + 0.99 * step_module.MARGIN * noise

    monkeypatch.setattr(step_module, "log_m", perturbed)
    for mix, h in (
        (Mixture(np.array([0.5, 0.5]), np.array([0.0, 1e-9])), 1e-5),  # L flat to 1e-9
        (Mixture(np.array([0.4, 0.6]), np.array([2e-7, 1e-6])), 1e-5),
        (lc_mixture([0.01, 0.02], [0.4, 0.3]), 1e-4),
    ):
        _assert_above_exact(step_pld(mix, h), mix, [0.0, 1e-6, 1e-4, 0.01, 0.1, 1.0])


@pytest.mark.parametrize(("mix", "h"), ADVERSARIAL[:9])
def test_both_pmfs_cover_every_x(mix: Mixture, h: float) -> None:
    """The add PMF is Q's distribution of the rounded loss: all of its mass is there; the
    remove PMF's masses bound P's from above: its total is at least 1."""
    pair = step_pld(mix, h)
    for pmf in (pair.remove, pair.add):
        assert float(np.sum(pmf._probs)) + pmf._infinity_mass >= 1.0 - 1e-15


@pytest.mark.parametrize(
    "mix",
    [
        lc_mixture([0.01, 0.02, 0.05], [0.4, 0.3, 0.6]),
        Mixture(np.array([0.5, 0.5]), np.array([1e-6, 2e-6])),
        Mixture(np.array([1.0, 1e-3]) / 1.001, np.array([0.0, 3.0])),
    ],
)
def test_dp_accountings_optimistic_step_is_below(mix: Mixture) -> None:
    pair = step_pld(mix, 1e-3)
    ref = pldlib.from_mixture_gaussian_mechanism(
        1.0,
        list(mix.shifts),
        list(mix.probs),
        value_discretization_interval=1e-3,
        pessimistic_estimate=False,
        use_connect_dots=False,
    )
    for eps in EPS:
        assert pair.delta_remove(eps) >= ref._pmf_remove.get_delta_for_epsilon(eps)
        assert pair.delta_add(eps) >= ref._pmf_add.get_delta_for_epsilon(eps)


# ---- composition ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mix", "h", "count"),
    [
        (lc_mixture([0.05] * 8, np.linspace(0.05, 0.6, 8)), 2e-3, 100),
        (lc_mixture([1.0, 0.1, 0.2], [0.5, 0.3, 0.4]), 1e-3, 50),  # no mass at 0
        (Mixture(np.array([1 - 1e-6, 1e-6]), np.array([0.0, 6.0])), 1e-3, 20),
        (lc_mixture([1e-9, 0.3], [5.0, 0.2]), 2e-3, 30),
        (Mixture(np.array([1.0]), np.array([0.3])), 1e-3, 50),  # Gaussian: exact too
    ],
)
def test_self_composition_above_an_optimistic_fft_oracle(
    mix: Mixture, h: float, count: int
) -> None:
    ours = step_pld(mix, h).to_pld().self_compose(count)
    (rem, r0), (add, a0) = lower_composed([(mix, count)], h / 4)
    for eps in (0.0, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0):
        assert ours._pmf_remove.get_delta_for_epsilon(eps) >= pmf_delta(rem, r0, h / 4, eps)
        assert ours._pmf_add.get_delta_for_epsilon(eps) >= pmf_delta(add, a0, h / 4, eps)


def test_lc_accountant_above_the_oracle_of_its_joint_composition() -> None:
    """LCAccountant._pld_epsilon composes the runs' first T - 1 steps (dp_accounting PLDs,
    regridded) with step_pld of the merged step; the oracle composes the optimistic PMFs
    of every subsampled Gaussian step and of the exact merged mixture."""
    rng = np.random.default_rng(5)
    n, delta, h = 5, 1e-5, 5e-4
    qs, sigmas = rng.uniform(0.02, 0.3, n), rng.uniform(0.6, 1.5, n)
    steps = rng.integers(2, 5, n)
    mechs = [
        parse_mechanism(sgd(float(s), int(t), float(q)))
        for q, s, t in zip(qs, sigmas, steps, strict=True)
    ]
    inputs = [lc.lc_input(m) for m in mechs]
    released = [
        lc.released_profile(i, compute_profile(m, discretization=1e-3))
        for i, m in zip(inputs, mechs, strict=True)
    ]
    acct = lc.LCAccountant(inputs, released, delta)
    lam = rng.dirichlet(np.ones(n))
    ours = acct.epsilon(lam, "pld")
    s = math.sqrt(float(np.sum((lam * sigmas) ** 2)))
    parts = [
        (Mixture(np.array([1 - q, q]), np.array([0.0, 1.0 / sg])), int(t) - 1)
        for q, sg, t in zip(qs, sigmas, steps, strict=True)
    ]
    parts.append((lc_mixture(qs, lam / s), 1))
    (rem, r0), (add, a0) = lower_composed(parts, h)
    truth_at_ours = max(pmf_delta(rem, r0, h, ours), pmf_delta(add, a0, h, ours))
    assert truth_at_ours <= delta
    # and not loose: the oracle needs most of that epsilon
    assert max(pmf_delta(rem, r0, h, ours - 0.05), pmf_delta(add, a0, h, ours - 0.05)) > delta


# ---- the merged-step mixture past exact enumeration -------------------------------------


@pytest.mark.parametrize("cap", [2048, 64, 8])
def test_convolved_and_coarsened_shifts_dominate_the_exact_ones(
    cap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounding shifts up is sound exactly when the coarse shift distribution dominates
    the exact one stochastically: P(A >= t) never smaller, at every t."""
    monkeypatch.setattr(merged_step, "MAX_COMPONENTS", cap)
    rng = np.random.default_rng(cap)
    q = np.concatenate([rng.uniform(1e-6, 0.3, 11), [1.0, 1 - 1e-12]])
    a = np.concatenate([rng.uniform(1e-3, 0.5, 11), [0.2, 1e-4]])
    exact_mix = lc_mixture(q, a)
    coarse = merged_step_mixture(q, a)
    assert coarse.shifts.shape[0] <= cap
    assert abs(float(coarse.probs.sum()) - 1.0) < 1e-14
    for t in exact_mix.shifts:
        above_exact = float(exact_mix.probs[exact_mix.shifts >= t].sum())
        assert float(coarse.probs[coarse.shifts >= t].sum()) >= above_exact - 1e-13


# ---- PMF deltas ------------------------------------------------------------------------


def test_pmf_deltas_of_a_pmf_spanning_800_nats_are_finite() -> None:
    """Losses 0..800 all with mass: one scaling reference overflowed (e^800 = inf) and the
    vectorised deltas (``PrivacyProfile.curves``) were nan where the scalar ones were 1."""
    pmf = pld_pmf.DensePLDPmf(1.0, 0, np.full(801, 1 / 801), 0.0, True)
    table = PmfDelta(pmf)
    losses = np.arange(801.0)
    for eps in (0.0, 5.0, 50.0, 700.0):
        direct = float(np.sum((np.maximum(0, -np.expm1(eps - losses))) / 801))
        got = table.many(np.array([eps]))[0]
        assert np.isfinite(got)
        assert direct <= got <= direct + 1e-11
        assert table(eps) == got


def test_pmf_deltas_never_below_the_direct_sum() -> None:
    rng = np.random.default_rng(2)
    for _ in range(30):
        size = int(rng.integers(1, 3000))
        h = float(10 ** rng.uniform(-4, 0))
        probs = rng.dirichlet(np.full(size, 0.2)) + rng.normal(0, 1e-17, size)
        first = int(rng.integers(-size, 2000 / h))
        pmf = pld_pmf.DensePLDPmf(h, first, probs, float(rng.choice([0.0, 1e-12])), True)
        table = PmfDelta(pmf)
        losses = (first + np.arange(size)) * h
        clipped = np.maximum(probs, 0.0)
        grid = np.concatenate([[0.0], np.sort(rng.uniform(0, losses[-1] + 1, 20))])
        many = table.many(grid)
        for eps, got in zip(grid, many, strict=True):
            direct = float(np.sum(clipped * -np.expm1(np.minimum(eps - losses, 0.0))))
            assert got >= min(1.0, direct + pmf._infinity_mass)
            assert table(float(eps)) == got


# ---- memos ---------------------------------------------------------------------------


def test_memos_return_fresh_values_that_callers_cannot_change() -> None:
    rdp = RdpProfile(
        np.array([2.0, 4.0]),
        np.array([1.0, 2.0]),
        {"kind": "subsampled_gaussian", "pairs": [[0.01, 1.0, 100]]},
    )
    orders = np.array([1.5, 3.0, 10.0])
    first = rdp.at(orders)
    first[:] = 0.0
    again = rdp.at(orders)
    assert np.all(again > 0)
    assert np.array_equal(again, RdpProfile(rdp.orders, rdp.epsilons, rdp.source).at(orders))

    mechs = [parse_mechanism(sgd(1.0, 3, 0.1)), parse_mechanism(sgd(1.2, 4, 0.05))]
    inputs = [lc.lc_input(m) for m in mechs]
    released = [
        lc.released_profile(i, compute_profile(m)) for i, m in zip(inputs, mechs, strict=True)
    ]
    acct = lc.LCAccountant(inputs, released, 1e-5)
    lam = np.array([0.5, 0.5])
    before = acct.epsilon(lam, "pld")
    lam[:] = [0.9, 0.1]  # the caller reuses its array: a new key, not the old answer
    fresh = lc.LCAccountant(inputs, released, 1e-5)
    assert acct.epsilon(lam, "pld") == fresh.epsilon(lam.copy(), "pld") != before
    assert acct.epsilon(np.array([0.5, 0.5]), "rdp") == fresh.epsilon(np.array([0.5, 0.5]), "rdp")


def test_a_nan_direction_never_drops_out_of_the_random_selection_bound() -> None:
    """max(x, nan) is x in Python: a nan add curve (a cached curve of a PMF wider than
    709 nats, from before PmfDelta's references) would have left only the remove one."""
    pi = np.array([0.5, 0.5])
    assert rs.rs_pld_delta(pi, np.array([1e-9, 1e-9]), np.array([np.nan, 1e-9])) == 1.0
    assert rs.rs_pld_delta(pi, np.array([np.nan, 1e-9]), np.array([1e-9, 1e-9])) == 1.0
    assert rs.rs_pld_delta(pi, np.array([1e-9, 3e-9]), np.array([1e-9, 1e-9])) == 2e-9
