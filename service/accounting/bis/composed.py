"""The PLD of balanced iteration subsampling, composed: k blocks of one participation
(the block reduction of ``bis.rdp.forward_rdp_blocks``) over the epochs, on a grid
refined from the epsilon it must resolve; ``bis.pld`` builds each block's PLD.
"""

from __future__ import annotations

from dp_accounting.pld import privacy_loss_distribution as pldlib

from service.accounting.bis.pld import MAX_POINTS, Curves, single_pld
from service.accounting.bis.rdp import blocks
from service.accounting.cost import gaussian_step_width
from service.accounting.pld.pair import PldPair, dense_self_compose
from service.accounting.pld.refine import refined_pld


def bis_pld(d: int, k: int, sigma: float, epochs: int, discretization: float) -> PldPair | None:
    """The pessimistic PLD of BIS (step 4); None where a block is over MAX_POINTS."""
    parts = _block_plds(d, k, sigma, discretization)
    return None if parts is None else _compose(parts, epochs)


def _block_plds(
    d: int, k: int, sigma: float, discretization: float, cache: dict | None = None
) -> list[tuple[pldlib.PrivacyLossDistribution, int]] | None:
    if not 1 <= k <= d:
        raise ValueError(f"need 1 <= k <= d, got d={d}, k={k}")
    parts = []
    for size, count in blocks(d, k):
        one = single_pld(size, sigma, discretization, cache)
        if one is None:
            return None
        parts.append((one, count))
    return parts


def _compose(parts: list[tuple[pldlib.PrivacyLossDistribution, int]], epochs: int) -> PldPair:
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    total: pldlib.PrivacyLossDistribution | None = None
    for one, count in parts:
        part = dense_self_compose(one, count)
        total = part if total is None else total.compose(part)
    if total is None:
        raise ValueError("no blocks")
    return PldPair.from_pld(dense_self_compose(total, epochs))


def _width(pld: pldlib.PrivacyLossDistribution) -> float:
    """Width of the losses a PMF pair holds (the wider direction)."""
    return max(
        len(pmf._probs) * pmf._discretization
        for pmf in (pld._pmf_remove.to_dense_pmf(), pld._pmf_add.to_dense_pmf())
    )


def profile_pld(
    d: int,
    k: int,
    sigma: float,
    epochs: int,
    tail_epsilon: float,
    discretization: float,
    max_points: float,
) -> tuple[PldPair | None, float, str | None]:
    """(PLD, grid width, why none) for a profile: on a grid refined from its epsilon
    (``refine``), within ``max_points`` for the composed PMF. The composed losses lie
    within +-``tail_epsilon`` (the RDP curve's Chernoff bound) up to the truncated tails,
    and within the sum of the blocks' widths."""
    if min(size for size, _ in blocks(d, k)) == 1:
        # a block of one step is the Gaussian mechanism, whose PLD is as wide as its loss
        points = gaussian_step_width(sigma) / discretization
        if points > max_points:
            why = f"a one-step block's Gaussian PLD needs about {points:.3g} grid points, over"
            return None, discretization, f"{why} the limit of {max_points:.3g}"
    cache: dict[int, tuple[Curves, Curves] | None] = {}
    parts = _block_plds(d, k, sigma, discretization, cache)
    if parts is None:
        longest = max(size for size, _ in blocks(d, k))
        why = f"the lognormal grid of one participation in {longest} steps needs more than"
        return None, discretization, f"{why} {MAX_POINTS} points, even with its tail cut"
    compositions = epochs * sum(c for _, c in parts)
    if compositions * discretization > 2.0 * tail_epsilon:
        # each composition may round the loss up by a grid step: past the RDP curve's
        # epsilon, the PLD can only be looser (and its PMF is wide and slow to build)
        return (
            None,
            discretization,
            (
                f"{compositions} compositions on a grid of {discretization:g} can drift past "
                "the RDP curve's own bound"
            ),
        )
    linear = epochs * sum(c * _width(p) for p, c in parts)
    width = max(max(_width(p) for p, _ in parts), min(linear, 2.0 * tail_epsilon))
    if width / discretization > max_points:
        why = f"the composed PLD needs about {width / discretization:.3g} grid points, over"
        return None, discretization, f"{why} the limit of {max_points:.3g}"

    def build(grid: float) -> PldPair:
        # the blocks' laws are cached: only the connect-the-dots grids are rebuilt
        more = parts if grid == discretization else _block_plds(d, k, sigma, grid, cache)
        if more is None:
            raise ValueError("a block was built at this size already")
        return _compose(more, epochs)

    pld, grid = refined_pld(build, discretization, lambda grid: width / grid, max_points)
    return pld, grid, None
