"""Per-model privacy profiles: an RDP curve and a PLD, one builder per mechanism type.

``profile`` is the profile record and ``compute_profile``; ``builders`` is the table
of builders by mechanism type (DP-SGD schedules, balanced iteration subsampling,
Gaussian, dp_event trees through ``dp_event``, given curves and (epsilon, delta)
pairs); ``claims`` checks a trainer's claimed guarantee against ours.

Oracles in the tests: dp_accounting's accountants for the same events, Opacus and
prv-accountant for DP-SGD, and properties every profile must have (RDP and PLD agree,
epsilon falls as delta grows).
"""
