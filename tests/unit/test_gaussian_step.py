"""The Gaussian step's PLD on arrays is dp_accounting's own PMF, value for value.

The oracle is the package's ``from_gaussian_mechanism`` (its per-epsilon inversion in
Python); ours must give the same losses, the same masses and the same infinite mass,
so every delta it gives is the package's pessimistic (upper) estimate."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting.pld.gaussian import gaussian_step_pld

CASES = [
    # (sigma, q, discretization, sensitivity)
    (0.8, 0.01, 1e-4, 1.0),  # a DP-SGD step
    (1.5, 0.004, 1e-4, 1.0),
    (0.5, 0.2, 1e-3, 1.0),  # a large sampling rate
    (10.0, 0.999, 1e-4, 1.0),  # next to full batch: the edge of the add direction
    (0.6, 1e-6, 1e-5, 1.0),  # a tiny rate: the remove edge log(1 - q) next to 0
    (1.0, 1.0, 1e-4, 1.0),  # no subsampling: one symmetric PMF
    (1.0, 1.0, 1e-3, 2.5),  # the merged Gaussian of linear combination: sensitivity A
    (4.0, 0.05, 3e-2, 1.0),  # a coarse grid
]


def _dense(pmf: pld_pmf.PLDPmf) -> pld_pmf.DensePLDPmf:
    return pmf if isinstance(pmf, pld_pmf.DensePLDPmf) else pmf.to_dense_pmf()


@pytest.mark.parametrize(("sigma", "q", "width", "sens"), CASES)
def test_the_pmf_is_the_packages(sigma: float, q: float, width: float, sens: float) -> None:
    theirs = pldlib.from_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivity=sens,
        sampling_prob=q,
        value_discretization_interval=width,
        pessimistic_estimate=True,
    )
    ours = gaussian_step_pld(sigma, q, width, sensitivity=sens)
    for a, b in ((theirs._pmf_remove, ours._pmf_remove), (theirs._pmf_add, ours._pmf_add)):
        assert type(a) is type(b)  # small PMFs stay sparse in both
        a, b = _dense(a), _dense(b)
        assert a._lower_loss == b._lower_loss and a._probs.shape == b._probs.shape
        np.testing.assert_allclose(b._probs, a._probs, rtol=1e-12, atol=0)
        assert b._infinity_mass == pytest.approx(a._infinity_mass, rel=1e-12, abs=0)
        assert b._pessimistic_estimate
    for delta in (1e-3, 1e-5, 1e-8):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(
            theirs.get_epsilon_for_delta(delta), rel=1e-12
        )
    assert (q == 1.0) == ours._symmetric


def test_one_epsilon_at_a_time_is_the_packages_path() -> None:
    """A scalar epsilon (the package's tail and bounds) goes through the package itself."""
    ours = gaussian_step_pld(0.8, 0.01, 1e-4)
    theirs = pldlib.from_gaussian_mechanism(
        standard_deviation=0.8, sampling_prob=0.01, value_discretization_interval=1e-4
    )
    for eps in (0.0, 0.5, 2.0):
        assert ours.get_delta_for_epsilon(eps) == pytest.approx(
            theirs.get_delta_for_epsilon(eps), rel=1e-12
        )
