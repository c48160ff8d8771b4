"""Checkpoint lineage: when two mechanisms can be checkpoints of one training run.

A checkpoint taken after ``s`` steps of a run was produced by the run's first ``s``
steps, so its mechanism must be exactly those steps. Only per-step mechanisms have
prefixes:

- ``dp_sgd``: step ``t`` is (sampling rate, noise multiplier, clipping norm or
  per-group clipping, learning rate); the run-level fields (sampling, optimizer,
  momentum, dampening, nesterov, the Poisson approximation) are shared by all steps.
  A checkpoint's step number is its ``total_steps``.
- ``gaussian``: ``count`` answers of one query family (sensitivity, noise, adaptive,
  additive); the step number is ``count``.
- ``balanced_iteration_subsampling``: the participation pattern spans a whole epoch of
  ``iterations`` steps, so a checkpoint is an epoch boundary: the step number is
  ``epochs * iterations`` and every other field is shared.

``rdp_curve``, ``epsilon_delta`` and ``non_private`` say nothing about prefixes and
cannot be checkpoints of a run. Pure functions: nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from service.accounting.mechanisms import (
    DPSGD,
    BalancedIterationSubsampling,
    Gaussian,
    Mechanism,
    Segment,
)

PER_STEP_TYPES = ("dp_sgd", "balanced_iteration_subsampling", "gaussian")

_DPSGD_RUN_FIELDS = (
    "sampling",
    "accept_poisson_approximation",
    "optimizer",
    "momentum",
    "dampening",
    "nesterov",
)
_SEGMENT_FIELDS = ("sampling_rate", "noise_multiplier", "clipping_norm", "groups", "learning_rate")
_BIS_RUN_FIELDS = (
    "iterations",
    "participations",
    "noise_multiplier",
    "clipping_norm",
    "learning_rate",
    "optimizer",
)


def lineage_steps(mechanism: Mechanism) -> int | None:
    """The number of steps a checkpoint with this mechanism was taken after; ``None``
    for mechanisms that cannot be checkpoints of a run."""
    if isinstance(mechanism, DPSGD):
        return mechanism.total_steps
    if isinstance(mechanism, Gaussian):
        return mechanism.count
    if isinstance(mechanism, BalancedIterationSubsampling):
        return mechanism.epochs * mechanism.iterations
    return None


def prefix_mismatch(earlier: Mechanism, later: Mechanism) -> str | None:
    """``None`` when ``earlier`` is exactly the first ``lineage_steps(earlier)`` steps of
    ``later``; otherwise where they first disagree ("step 3: noise_multiplier 1.1 !=
    1.3", "optimizer 'sgd' != 'adam'"). Steps are numbered from 1."""
    t_early, t_late = lineage_steps(earlier), lineage_steps(later)
    if t_early is None or t_late is None:
        return "only dp_sgd, balanced_iteration_subsampling and gaussian have prefixes"
    if earlier.type != later.type:
        return f"mechanism type {earlier.type!r} != {later.type!r}"
    if t_early > t_late:
        return f"steps {t_early} > {t_late}"
    if isinstance(earlier, DPSGD) and isinstance(later, DPSGD):
        return _field_mismatch(earlier, later, _DPSGD_RUN_FIELDS) or _segments_mismatch(
            earlier.segments(), later.segments(), t_early
        )
    if isinstance(earlier, Gaussian) and isinstance(later, Gaussian):
        a, b = earlier.canonical(), later.canonical()
        for key in sorted(set(a) | set(b)):
            if key != "count" and a.get(key) != b.get(key):
                return f"{key} {a.get(key)!r} != {b.get(key)!r}"
        return None
    if isinstance(earlier, BalancedIterationSubsampling) and isinstance(
        later, BalancedIterationSubsampling
    ):
        return _field_mismatch(earlier, later, _BIS_RUN_FIELDS)
    return f"mechanism type {earlier.type!r} != {later.type!r}"  # pragma: no cover


def _field_mismatch(a: Any, b: Any, fields: tuple[str, ...]) -> str | None:
    for name in fields:
        x, y = getattr(a, name), getattr(b, name)
        if x != y:
            return f"{name} {x!r} != {y!r}"
    return None


def _segments_mismatch(early: list[Segment], late: list[Segment], steps: int) -> str | None:
    """The first of the first ``steps`` steps where the two schedules differ."""
    i = j = 0
    used_i = used_j = 0  # steps of early[i] / late[j] already walked
    at = 0  # steps compared so far
    while at < steps:
        a, b = early[i], late[j]
        for name in _SEGMENT_FIELDS:
            x, y = _dump(getattr(a, name)), _dump(getattr(b, name))
            if x != y:
                return f"step {at + 1}: {name} {x!r} != {y!r}"
        take = min(a.steps - used_i, b.steps - used_j, steps - at)
        at += take
        used_i += take
        used_j += take
        if used_i == a.steps:
            i, used_i = i + 1, 0
        if used_j == b.steps:
            j, used_j = j + 1, 0
    return None


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [g.model_dump(mode="json") for g in value]
    return value
