"""The default objective without metrics: the noise-to-signal ratio of the training.

Objective 'signal' scores a model by what its mechanism says about how much it
learned, never by the model itself, so a plan scored by it costs no privacy.

The proxy, for DP-SGD (Poisson rate q_t, noise multiplier sigma_t, clipping norm
C_t, learning rate lr_t at step t; lr_t = 1 when the record gives none):

    NSR = sum_t (lr_t sigma_t C_t)^2 / (sum_t lr_t q_t C_t)^2

Reasoning: a step adds lr_t (g_t + N(0, sigma_t^2 C_t^2)) to the weights, where g_t
is the sum of the batch's clipped gradients, about q_t n C_t in norm when gradients
are clipped (n examples). Signal adds up coherently over steps, noise only in
variance, so the accumulated update's noise-to-signal ratio is the formula above
divided by n^2; n is the same for every model of a dataset, so it is left out. For a
constant schedule it is sigma^2 / (T q^2) per unit of clipping: more steps or a
larger batch lower it, more noise raises it. Balanced iteration subsampling takes
q = k / T_epoch (each example in k of the epoch's steps), model splitting
q = rate * k / d (each part sees that fraction of the examples); a Gaussian release with
``count`` answers of one query takes std^2 / (count * sensitivity^2).

Unlike the merged noise variance (objective 'noise', sum_t (lr sigma C)^2), which
grows with every step and so prefers the least trained checkpoint, the ratio falls
as a run trains: within one run a later checkpoint scores better.

Limits, stated with every plan it chooses: it assumes the clipped gradients keep
pointing the same way (late in training they do less, so the ratio overrates long
runs past convergence), that gradients are clipped (norm about C), and it knows
nothing of the architecture, the learning rate's tuning or the data; it compares
models of one dataset only. A metric (declared public) or the public validation
split, when there is one, is preferred to it. For LC the ratio of the merge is
sum_i lambda_i^2 NSR_i, which assumes the models share their signal: true for
averaging one run's checkpoints or convex models, not for independently initialised
networks: under it method 'auto' weighs LC only for fixed-query Gaussian releases.
"""

from __future__ import annotations

from service.accounting.mechanisms import DPSGD, Gaussian, Mechanism
from service.accounting.mechanisms.others import BalancedIterationSubsampling
from service.accounting.mechanisms.splitting import ModelSplitting

SIGNAL_NOTE = (
    "objective 'signal' (the default without metrics): the noise-to-signal ratio of "
    "each model's accumulated update, sigma^2 / (steps * q^2) per unit of clipping "
    "(lower is better), read from the mechanisms only; it assumes gradients stay "
    "aligned and clipped and knows nothing of architecture or data"
)


def noise_to_signal(mechanism: Mechanism) -> float | None:
    """The proxy of the module docstring, or None when the mechanism does not say (an RDP
    curve, an (epsilon, delta) pair, a non-private model)."""
    if isinstance(mechanism, DPSGD):
        noise = 0.0
        signal = 0.0
        for seg in mechanism.segments():
            lr = seg.learning_rate if seg.learning_rate is not None else 1.0
            c = seg.total_clipping_norm
            noise += seg.steps * (lr * seg.effective_noise_multiplier * c) ** 2
            signal += seg.steps * lr * seg.sampling_rate * c
        return noise / signal**2 if signal > 0 else None
    if isinstance(mechanism, BalancedIterationSubsampling):
        steps = mechanism.iterations * mechanism.epochs
        q = mechanism.participations / mechanism.iterations
        return float(mechanism.noise_multiplier**2 / (steps * q**2))
    if isinstance(mechanism, ModelSplitting):
        # each part of the split receives a fraction k / d of the sampled examples
        q = mechanism.sampling_rate * mechanism.parts_per_example / mechanism.parts
        return float(mechanism.noise_multiplier**2 / (mechanism.steps * q**2))
    if isinstance(mechanism, Gaussian):
        return float(mechanism.std**2 / (mechanism.count * mechanism.sensitivity**2))
    return None
