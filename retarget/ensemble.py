"""A reference loader for ``ensemble`` releases: one run's checkpoints, combined at inference.

Pull the release into a folder (``retarget releases download RELEASE -o ./ens`` or
``RetargetClient().releases.download_folder(release_id, "./ens")``), then::

    from retarget.ensemble import load_ensemble

    ensemble = load_ensemble("./ens", lambda: MyNet())   # builds the architecture
    labels = ensemble(x)               # the manifest's rule: OPA or OMV
    probs = ensemble.probabilities(x)  # OPA's weighted mean of softmax probabilities
    votes = ensemble.votes(x)          # OMV's weighted votes per class

``ensemble.json`` (written by the service) lists the members, oldest checkpoint first,
their weights and files, and ``combine``: ``mean_probabilities`` (OPA: the label is the
argmax of sum_i w_i softmax(f_i(x))) or ``majority_vote`` (OMV: each member votes for
argmax f_i(x) with weight w_i; the label with the most weight wins). Ties go to the
lowest class index in both. The rules are those of "Recycling Scraps: Improving
Private Learning by Leveraging Checkpoints" (Shejwalkar et al., PoPETs 2025).

Needs ``torch`` and ``safetensors`` (imported when called, not when ``retarget`` is);
the members are safetensors files, so loading runs no code from the release.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MANIFEST = "ensemble.json"
COMBINES = ("mean_probabilities", "majority_vote")


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """``ensemble.json`` of a pulled release, checked: a known format and combine rule,
    at least one member, weights >= 0 summing to 1, files inside the folder."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ValueError(f"{path} is missing: not an ensemble release folder")
    record = json.loads(path.read_text())
    if record.get("format") != "retarget.ensemble" or record.get("version") != 1:
        raise ValueError(
            f"{path}: format {record.get('format')!r} version {record.get('version')!r} "
            "is not one this loader reads (retarget.ensemble, version 1)"
        )
    if record.get("combine") not in COMBINES:
        raise ValueError(
            f"{path}: combine must be one of {COMBINES}, got {record.get('combine')!r}"
        )
    members = record.get("members") or []
    if not members:
        raise ValueError(f"{path}: no members")
    weights = [float(m["weight"]) for m in members]
    if any(w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
        raise ValueError(f"{path}: member weights must be >= 0 and sum to 1, got {weights}")
    for m in members:
        for f in m["files"]:
            rel = Path(m["path"]) / f
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"{path}: member file {str(rel)!r} is outside the folder")
    return dict(record)


def member_state_dict(folder: str | Path, member: dict[str, Any]) -> dict[str, torch.Tensor]:
    """One member's tensors: every safetensors file of it (one file, or the shards of a
    bundle), merged into one state dict."""
    from safetensors.torch import load_file

    if member.get("kind") == "peft_lora":
        raise ValueError("a LoRA adapter member needs its base model: load it with peft")
    state: dict[str, torch.Tensor] = {}
    for name in member["files"]:
        if name.endswith(".safetensors"):
            state.update(load_file(str(Path(folder) / member["path"] / name)))
    if not state:
        raise ValueError(f"member {member['index']} has no safetensors file")
    return state


@dataclass
class Ensemble:
    """The members (in eval mode), their weights and the manifest's rule."""

    members: list[torch.nn.Module]
    weights: list[float]
    combine: str
    manifest: dict[str, Any]

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """OPA: sum_i w_i softmax(f_i(x)) over the last dimension."""
        import torch

        with torch.no_grad():
            total = None
            for model, w in zip(self.members, self.weights, strict=True):
                p = torch.softmax(model(x).double(), dim=-1) * w
                total = p if total is None else total + p
        assert total is not None  # read_manifest: at least one member
        return total

    def votes(self, x: torch.Tensor) -> torch.Tensor:
        """OMV: per class, the weight of the members whose argmax it is (equal weights:
        counted exactly, as integers)."""
        import torch

        uniform = len(set(self.weights)) == 1
        with torch.no_grad():
            total = None
            for model, w in zip(self.members, self.weights, strict=True):
                logits = model(x)
                one = torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1])
                vote = one.long() if uniform else one.double() * w
                total = vote if total is None else total + vote
        assert total is not None
        return total

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The labels under the manifest's rule; ties to the lowest class index (argmax
        returns the first maximum)."""
        scores = self.probabilities(x) if self.combine == "mean_probabilities" else self.votes(x)
        return scores.argmax(dim=-1)


def load_ensemble(
    folder: str | Path,
    build: Callable[[], torch.nn.Module],
    *,
    device: str | torch.device | None = None,
    strict: bool = True,
) -> Ensemble:
    """Every member of the pulled ensemble in ``folder``: ``build()`` makes the
    architecture, each member's state dict is loaded into its own copy (``strict``
    as ``load_state_dict``), moved to ``device`` and set to eval mode."""
    record = read_manifest(folder)
    members = []
    for member in record["members"]:
        model = build()
        model.load_state_dict(member_state_dict(folder, member), strict=strict)
        if device is not None:
            model = model.to(device)
        members.append(model.eval())
    return Ensemble(
        members=members,
        weights=[float(m["weight"]) for m in record["members"]],
        combine=str(record["combine"]),
        manifest=record,
    )
