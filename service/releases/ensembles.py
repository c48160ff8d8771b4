"""Releasing an ensemble: one run's checkpoints side by side, and how to combine them.

An ``ensemble`` release ("Recycling Scraps: Improving Private Learning by Leveraging
Checkpoints", Shejwalkar et al., PoPETs 2025, Section 3.2: OPA and OMV) is a bundle
of kind ``ensemble``:

- ``members/<i>/...``: member i's files as they were registered (a single file as
  ``members/<i>/model.safetensors``; a bundle's shards, index and sidecars under its
  own paths), oldest checkpoint first; nothing is merged or copied, the files refer to
  the stored blobs;
- ``ensemble.json``: the manifest (``manifest``): the members in order with their
  ids, names, steps, weights and files, and how to combine their outputs;
- ``README.md`` and ``privacy.json``, as every bundle release.

Its certificate is the latest member's (``service.accounting.planning.checkpoints``):
the members are checkpoints of one run with verified lineage, so shipping them all is
post-processing of the run up to the latest one.
"""

from __future__ import annotations

import json
from typing import Any

from service.formats.bundles import MODEL_CARD, PRIVACY
from service.merging.bundles import OutFile
from service.registry.blobs import BlobStore
from service.registry.models import Model
from service.releases.bundles import bundle_input, model_card, privacy_json, store_files

KIND = "ensemble"
MANIFEST = "ensemble.json"
MANIFEST_VERSION = 1

#: how each combine rule reads, for the manifest and the model card
COMBINE_RULES = {
    "mean_probabilities": (
        "OPA: the weighted mean of the members' softmax probabilities, sum_i w_i "
        "softmax(f_i(x)); the label is its argmax (ties: the lowest class index)"
    ),
    "majority_vote": (
        "OMV: each member votes for its argmax label with its weight; the label with "
        "the largest total wins, ties broken by the lowest class index"
    ),
}


def member_order(models: dict[str, Model], weights: dict[str, float]) -> list[str]:
    """The members' ids, oldest checkpoint first (by lineage step, then id)."""
    return sorted(weights, key=lambda m: (models[m].lineage_step or 0, m))


def manifest(
    models: dict[str, Model],
    weights: dict[str, float],
    combine: str,
    files: dict[str, list[str]],
) -> dict[str, Any]:
    """``ensemble.json``: what a loader needs to rebuild the ensemble's prediction."""
    if combine not in COMBINE_RULES:
        raise ValueError(f"combine must be one of {sorted(COMBINE_RULES)}, got {combine!r}")
    members = []
    for i, mid in enumerate(member_order(models, weights)):
        model = models[mid]
        members.append(
            {
                "index": i,
                "model_id": mid,
                "name": model.name,
                "run_id": model.lineage_run_id,
                "step": model.lineage_step,
                "weight": weights[mid],
                "kind": model.kind,
                "path": f"members/{i}",
                "files": files[mid],
            }
        )
    return {
        "format": "retarget.ensemble",
        "version": MANIFEST_VERSION,
        "combine": combine,
        "combine_rule": COMBINE_RULES[combine],
        "tie_break": "lowest class index",
        "members": members,
    }


def release_ensemble(
    *,
    blobs: BlobStore,
    models: dict[str, Model],
    weights: dict[str, float],
    provenance: dict[str, str],
) -> tuple[str, int, str, list[dict[str, Any]]]:
    """(manifest sha256, total size, kind, files) of the ensemble bundle."""
    combine = provenance.get("retarget.combine", "mean_probabilities")
    out: list[OutFile] = []
    files: dict[str, list[str]] = {}
    for i, mid in enumerate(member_order(models, weights)):
        item = bundle_input(blobs, models[mid], weights[mid])  # StorageError when missing
        paths = [p for p in sorted(item.shas) if p not in (MODEL_CARD, PRIVACY)]
        files[mid] = paths
        out.extend(OutFile(path=f"members/{i}/{p}", sha256=item.shas[p]) for p in paths)
    record = manifest(models, weights, combine, files)
    data = json.dumps(record, indent=2, sort_keys=True).encode() + b"\n"
    out.append(OutFile(path=MANIFEST, data=data))
    out.append(OutFile(path=MODEL_CARD, data=model_card(provenance, KIND).encode()))
    out.append(OutFile(path=PRIVACY, data=privacy_json(provenance)))
    return store_files(blobs, KIND, out)
