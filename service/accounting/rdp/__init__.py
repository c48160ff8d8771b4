"""Renyi DP of Gaussian mechanisms, plain and Poisson-subsampled, and the best order.

Source: Mironov, "Renyi Differential Privacy of the Sampled Gaussian Mechanism"
(arXiv 1908.10530) for the subsampled Gaussian; the order is searched over all real
orders > 1 (``orders``: no fixed grid, no ceiling); ``profile`` keeps a profile's
curve as a table plus its exact source.

Oracles in the tests: dp_accounting's RDP accountant at its best grid order, Opacus
and prv-accountant, and mpmath for tiny values.
"""
