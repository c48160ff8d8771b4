"""Balanced iteration subsampling: each example takes part in exactly k of d steps.

Source: "Balanced Iteration Subsampling" (the paper in the product's references) for
the mechanism and its forward RDP (Lemma 3.12's dynamic program); the reverse direction
exact at every order (``reverse``); the random-allocation bound of Feldman and Shenfeld
(arXiv 2502.08202) as a candidate; and a certified PLD of one participation's
likelihood ratio, a mean of d lognormals (``pld``, ``grid``, ``heavy``).

Oracles in the tests: Gauss-Hermite quadrature in 2-6 dimensions, Monte Carlo with
intervals, mpmath, scipy's adaptive quadrature, and the random-allocation package.
"""
