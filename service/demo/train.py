"""Train DP models with Opacus (Poisson sampling, plain SGD) and save them as safetensors
with the exact mechanism that trained them.

Opacus adds N(0, sigma^2 C^2) to the *sum* of clipped per-example gradients and
divides by the expected batch size B = q n, so a step moves the weights by
(lr / B) * (sum of clipped gradients + noise). The registry's ``learning_rate`` is
that step size on the sum, lr / B: linear-combination accounting weighs models
by lambda * learning_rate * C.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from service.demo.data import Split

FAMILIES = ("logreg", "mlp")


@dataclass(frozen=True)
class TrainConfig:
    name: str
    family: str  # logreg | mlp
    noise_multiplier: float
    clipping_norm: float
    epochs: int = 20
    batch_size: int = 64
    learning_rate: float = 2.0
    seed: int = 42
    #: which of the demo's repetitions this run belongs to (None: not repeated)
    repetition: int | None = None
    hidden: int = 32
    #: save a checkpoint after these epochs too (one run's checkpoints, paper H.3)
    checkpoint_epochs: tuple[int, ...] = ()


@dataclass
class TrainedModel:
    name: str
    path: Path
    metadata: dict[str, Any]
    test_accuracy: float
    extra: dict[str, Any] = field(default_factory=dict)


def build(family: str, hidden: int = 32) -> nn.Sequential:
    if family == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    if family == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")


def architecture_of(model: nn.Sequential) -> dict[str, Any]:
    """The declared architecture (service.merging.architecture) of a Sequential."""
    layers: list[dict[str, Any]] = []
    for name, module in model.named_children():
        if isinstance(module, nn.Flatten):
            layers.append({"op": "flatten"})
        elif isinstance(module, nn.Linear):
            layers.append(
                {
                    "op": "linear",
                    "weight": f"{name}.weight",
                    "bias": f"{name}.bias" if module.bias is not None else None,
                }
            )
        elif isinstance(module, nn.ReLU):
            layers.append({"op": "relu"})
        else:
            raise ValueError(f"no declared layer for {type(module).__name__}")
    return {"format": "sequential", "task": "classification", "input_shape": [64], "layers": layers}


@torch.no_grad()
def accuracy(model: nn.Module, split: Split) -> float:
    model.eval()
    return float((model(split.inputs).argmax(1) == split.labels).float().mean())


def train(
    cfg: TrainConfig,
    train_split: Split,
    validation: Split,
    test: Split,
    out_dir: Path,
    progress: Callable[[str], None] = print,
    shown: set[str] | None = None,
) -> list[TrainedModel]:
    """Train one run; return its final model and any earlier checkpoints asked for.
    Library notices already in ``shown`` (shared by the runs of one demo) are not
    repeated."""
    from opacus import PrivacyEngine

    logging.getLogger("opacus").setLevel(logging.ERROR)
    torch.manual_seed(cfg.seed)
    model = build(cfg.family, cfg.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.learning_rate)
    dataset = torch.utils.data.TensorDataset(train_split.inputs, train_split.labels)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        generator=torch.Generator().manual_seed(cfg.seed),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = PrivacyEngine(accountant="rdp", secure_mode=False)
    _show_once(caught, progress, set() if shown is None else shown)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        private, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=cfg.noise_multiplier,
            max_grad_norm=cfg.clipping_norm,
            poisson_sampling=True,
        )
    q = float(loader.sample_rate)
    expected_batch = optimizer.expected_batch_size
    loss_fn = nn.CrossEntropyLoss()
    out_dir.mkdir(parents=True, exist_ok=True)
    saved: list[TrainedModel] = []
    steps = 0
    for epoch in range(1, cfg.epochs + 1):
        private.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Opacus' hook notices, once per batch
            for xb, yb in loader:
                optimizer.zero_grad()
                if len(yb):
                    loss_fn(private(xb), yb).backward()
                optimizer.step()  # an empty Poisson batch is still a step: noise only
                steps += 1
        last = epoch == cfg.epochs
        if last or epoch in cfg.checkpoint_epochs:
            name = cfg.name if last and not cfg.checkpoint_epochs else f"{cfg.name}-e{epoch}"
            saved.append(
                _save(cfg, model, name, q, expected_batch, steps, validation, test, out_dir)
            )
            progress(
                f"  trained {name}: {steps} steps, q={q:.4f}, "
                f"val {saved[-1].metadata['metrics']['val_accuracy']:.3f}, "
                f"test {saved[-1].test_accuracy:.3f}"
            )
    return saved


def _show_once(
    caught: list[warnings.WarningMessage], progress: Callable[[str], None], shown: set[str]
) -> None:
    """Opacus warns on every engine it builds (secure RNG off: fine for a demo, which
    trains fast; production training turns ``secure_mode`` on). Say each notice once."""
    for w in caught:
        text = " ".join(str(w.message).split())
        if text not in shown:
            shown.add(text)
            progress(f"note from Opacus (shown once): {text}")


def _save(
    cfg: TrainConfig,
    model: nn.Sequential,
    name: str,
    q: float,
    expected_batch: int,
    steps: int,
    validation: Split,
    test: Split,
    out_dir: Path,
) -> TrainedModel:
    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    path = out_dir / f"{name}.safetensors"
    save_file(tensors, str(path))
    metadata: dict[str, Any] = {
        "name": name,
        "mechanism": {
            "type": "dp_sgd",
            "sampling": "poisson",
            "sampling_rate": q,
            "noise_multiplier": cfg.noise_multiplier,
            "clipping_norm": cfg.clipping_norm,
            "steps": steps,
            "learning_rate": cfg.learning_rate / expected_batch,
            "optimizer": "sgd",
        },
        "lineage": {"run_id": cfg.name, "step": steps},
        "metrics": {"val_accuracy": accuracy(model, validation)},
        "architecture": architecture_of(model),
    }
    (out_dir / f"{name}.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return TrainedModel(name, path, metadata, accuracy(model, test), {"repetition": cfg.repetition})
