"""Privacy loss distributions (PLDs): dp_accounting's pessimistic PMFs, kept per direction.

``pair`` stores a PMF per direction and answers epsilon and delta queries; ``fourier``
composes many distinct Poisson-subsampled Gaussian steps in one pass (their PMFs from
the closed form, ``step_pmfs``); ``schedule`` is the PLD of a DP-SGD run, grouping
steps (``grouping``) only past a work limit; ``refine`` picks the grid from the epsilon
it must resolve; ``gaussian`` is the exact Gaussian curve (Balle and Wang 2018) and
connect-the-dots; ``curves`` are hockey-stick curves on a fixed epsilon grid.

Oracles in the tests: dp_accounting's PLDs of every step composed one by one,
optimistic (a lower estimate: ours is never below it) and pessimistic (ours within
0.1% of it).
"""
