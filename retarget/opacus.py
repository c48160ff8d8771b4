"""Record an Opacus training run's exact mechanism as it happens, and register its
checkpoints with it.

    model, optimizer, loader = engine.make_private(module=..., optimizer=...,
                                                   data_loader=..., noise_multiplier=1.1,
                                                   max_grad_norm=1.0)
    recorder = OpacusRecorder.attach(optimizer, loader)   # after make_private
    ... train ...
    recorder.mechanism()        # {"type": "dp_sgd", "sampling_rate": ..., "steps": ...}
    register_checkpoint(client, model, recorder, dataset_id=ds.id, name="run-1")

The recorder wraps the optimizer's step hook (Opacus' ``attach_step_hook`` replaces
the previous hook, so the recorder calls the one it found, Opacus' own accountant,
before recording): the accountant keeps counting exactly as before. The hook runs
once per noisy step, after clipping and noise and before the parameters move, so
each record is the step as applied: the sampling rate (times the accumulated
virtual steps), the noise multiplier and clipping norm (or per-layer norms) the
optimizer holds now, and the learning rate of that step. Skipped virtual steps
release nothing and are not recorded.

The learning rate recorded is the one applied to the *sum* of clipped gradients
plus noise, as the registry defines it: with Opacus' default ``loss_reduction="mean"``
the optimizer divides that sum by the expected batch size, so the recorded value is
``lr / (expected_batch_size * accumulated_iterations)``.
"""

from __future__ import annotations

import math
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_model

from retarget.client import Model, RetargetClient

OPTIMIZERS = {
    "SGD": "sgd",
    "Adam": "adam",
    "AdamW": "adamw",
    "Adagrad": "adagrad",
    "RMSprop": "rmsprop",
}


class OpacusRecorder:
    """Records every noisy step of a ``DPOptimizer`` (see the module docstring)."""

    def __init__(
        self,
        optimizer: Any,
        *,
        sample_rate: float,
        poisson: bool = True,
        accept_poisson_approximation: bool = False,
        run_id: str | None = None,
    ) -> None:
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
        self.optimizer = optimizer
        self.sample_rate = float(sample_rate)
        self.poisson = poisson
        self.accept_poisson_approximation = accept_poisson_approximation
        self.run_id = run_id or f"opacus-{uuid.uuid4()}"
        self.steps: list[dict[str, Any]] = []
        self._previous: Callable[[Any], None] | None = optimizer.step_hook
        optimizer.attach_step_hook(self._hook)

    @classmethod
    def attach(cls, optimizer: Any, data_loader: Any, **kwargs: Any) -> OpacusRecorder:
        """A recorder for ``optimizer`` trained on ``data_loader`` (what ``make_private``
        returned): Poisson sampling at the loader's ``sample_rate`` when it is Opacus'
        ``DPDataLoader``; otherwise shuffled batches of rate 1 / len(loader), which the
        registry accounts only as a heuristic and only with
        ``accept_poisson_approximation=True``."""
        from opacus.data_loader import DPDataLoader

        if isinstance(data_loader, DPDataLoader):
            return cls(optimizer, sample_rate=data_loader.sample_rate, poisson=True, **kwargs)
        return cls(optimizer, sample_rate=1.0 / len(data_loader), poisson=False, **kwargs)

    def detach(self) -> None:
        """Give the optimizer back the hook it had."""
        if self.optimizer.step_hook == self._hook:
            self.optimizer.step_hook = self._previous

    def _hook(self, optim: Any) -> None:
        if self._previous is not None:
            self._previous(optim)  # Opacus' accountant first, as without the recorder
        self.steps.append(self._step(optim))

    def _step(self, optim: Any) -> dict[str, Any]:
        accumulated = int(getattr(optim, "accumulated_iterations", 1) or 1)
        step: dict[str, Any] = {
            "sampling_rate": min(1.0, self.sample_rate * accumulated),
            "learning_rate": self._learning_rate(optim, accumulated),
        }
        sigma = float(optim.noise_multiplier)
        norms = getattr(optim, "max_grad_norms", None)
        if norms is None:
            step["noise_multiplier"] = sigma
            step["clipping_norm"] = float(optim.max_grad_norm)
        else:
            # per-layer clipping: parameter p clipped to C_p, noise std sigma * ||C||_2 in
            # every coordinate, i.e. multiplier sigma * ||C||_2 / C_p in its own group
            total = float(optim.max_grad_norm)
            step["groups"] = [
                {"clipping_norm": float(c), "noise_multiplier": sigma * total / float(c)}
                for c in norms
            ]
        return step

    def _learning_rate(self, optim: Any, accumulated: int) -> float | None:
        rates = {float(g["lr"]) for g in optim.param_groups}
        if len(rates) != 1:
            return None  # parameter groups disagree: no single learning rate (LC: joint)
        lr = rates.pop()
        if getattr(optim, "loss_reduction", "mean") == "mean":
            lr /= float(optim.expected_batch_size) * accumulated
        return lr if lr > 0 and math.isfinite(lr) else None

    def _optimizer_fields(self) -> dict[str, Any]:
        inner = getattr(self.optimizer, "original_optimizer", self.optimizer)
        kind = OPTIMIZERS.get(type(inner).__name__, "other")
        if kind != "sgd":
            return {"optimizer": kind}
        group = inner.param_groups[0]
        momentum = float(group.get("momentum", 0.0) or 0.0)
        if momentum == 0.0:
            return {"optimizer": "sgd"}
        fields: dict[str, Any] = {"optimizer": "sgd_momentum", "momentum": momentum}
        if group.get("dampening"):
            fields["dampening"] = float(group["dampening"])
        if group.get("nesterov"):
            fields["nesterov"] = True
        return fields

    def mechanism(self) -> dict[str, Any]:
        """The registry's ``dp_sgd`` record of the steps so far: constant fields when every
        step was the same, a schedule of segments otherwise. Validated before it is
        returned, so the service accepts it."""
        if not self.steps:
            raise ValueError("no step was recorded yet")
        segments: list[dict[str, Any]] = []
        for step in self.steps:
            if segments and {k: v for k, v in segments[-1].items() if k != "steps"} == step:
                segments[-1]["steps"] += 1
            else:
                segments.append({"steps": 1, **step})
        for seg in segments:
            if seg["learning_rate"] is None:
                del seg["learning_rate"]
        record: dict[str, Any] = {"type": "dp_sgd", **self._optimizer_fields()}
        if self.poisson:
            record["sampling"] = "poisson"
        elif self.accept_poisson_approximation:
            record["sampling"] = "shuffle"
            record["accept_poisson_approximation"] = True
        else:
            raise ValueError(
                "the batches were not Poisson-sampled (not Opacus' DPDataLoader): no tight "
                "accounting exists; pass accept_poisson_approximation=True to register them "
                "as Poisson sampling at the same rate, a heuristic marked as such"
            )
        if len(segments) == 1:
            record.update(segments[0])
        else:
            record["schedule"] = segments
        for seg in segments:
            _check(seg)
        return record


def _check(segment: dict[str, Any]) -> None:
    """Refuse a step the registry would refuse: a sampling rate outside (0, 1], a noise
    multiplier or clipping norm that is not a positive finite number."""
    rate = segment["sampling_rate"]
    if not 0 < rate <= 1:
        raise ValueError(f"sampling_rate must be in (0, 1], got {rate}")
    for part in segment.get("groups") or [segment]:
        for field in ("noise_multiplier", "clipping_norm"):
            value = part[field]
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{field} must be a positive finite number, got {value}")


def register_checkpoint(
    client: RetargetClient,
    model: torch.nn.Module,
    recorder: OpacusRecorder,
    *,
    dataset_id: str,
    name: str,
    metrics: dict[str, float] | None = None,
    version: int | None = None,
    **extra: Any,
) -> Model:
    """Upload ``model``'s state dict as safetensors with the recorder's mechanism and
    lineage (``run_id``, step = the steps so far): one call per checkpoint."""
    inner = getattr(model, "_module", model)  # Opacus' GradSampleModule wraps the model
    with tempfile.TemporaryDirectory(prefix="retarget-") as tmp:
        path = Path(tmp) / f"{name}.safetensors"
        save_model(inner, str(path), metadata={"format": "pt"})
        return client.models.register(
            path,
            dataset_id=dataset_id,
            name=name,
            mechanism=recorder.mechanism(),
            version=version,
            run_id=recorder.run_id,
            step=len(recorder.steps),
            metrics=metrics,
            extra=extra or None,
        )
