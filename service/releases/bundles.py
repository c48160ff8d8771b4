"""Releasing bundles: the merged (or drawn) files, a model card and ``privacy.json``.

Every output file is staged (streamed, hashed) before any is moved into place, and
the release's manifest (kind and files) is stored as one more blob whose sha256 is
the release's; copies of inputs' sidecars, and an RS release's drawn shards, refer
to the stored blobs as they are.
"""

from __future__ import annotations

import json
from typing import Any

from service.errors import StorageError
from service.formats.bundles import MODEL_CARD, PRIVACY
from service.merging.bundles import BundleInput, OutFile, combine
from service.registry.blobs import BlobStore, StagedBlob
from service.registry.bundles import manifest_bytes, promote_all
from service.registry.models import Model


def is_bundle_release(models: dict[str, Model]) -> bool:
    return any(m.files is not None for m in models.values())


def bundle_input(blobs: BlobStore, model: Model, weight: float) -> BundleInput:
    files = list(model.files or [])
    if not files:  # a single safetensors file in a release of bundles
        files = [{"path": "model.safetensors", "sha256": model.sha256, "size": model.size_bytes}]
    paths = {}
    for f in files:
        path = blobs.local_path(f["sha256"])
        if not path.is_file():
            raise StorageError(f"file {f['path']} of model {model.id!r} is missing from the store")
        paths[f["path"]] = path
    kind = model.kind if model.files is not None else "hf_bundle"
    return BundleInput(weight, kind, paths, {f["path"]: f["sha256"] for f in files})


def release_bundle(
    *,
    blobs: BlobStore,
    models: dict[str, Model],
    weights: dict[str, float],
    drawn: str | None,
    out_dtype: str | None,
    max_shard_size: int | None,
    provenance: dict[str, str],
) -> tuple[str, int, str, list[dict[str, Any]]]:
    """(manifest sha256, total size, kind, files) of the released bundle."""
    if drawn is not None and out_dtype is None and max_shard_size is None:
        model = models[drawn]  # RS: the drawn bundle's own files
        item = bundle_input(blobs, model, 1.0)
        kind = item.kind
        out = [OutFile(path=p, sha256=s) for p, s in sorted(item.shas.items()) if p != MODEL_CARD]
        out = [f for f in out if f.path != PRIVACY]
    else:
        chosen = {drawn: 1.0} if drawn is not None else weights
        inputs = [bundle_input(blobs, models[m], w) for m, w in sorted(chosen.items())]
        kind = inputs[0].kind
        out = combine(
            inputs, out_dtype=out_dtype, max_shard_size=max_shard_size, metadata=provenance
        )
    out.append(OutFile(path=MODEL_CARD, data=model_card(provenance, kind).encode()))
    out.append(OutFile(path=PRIVACY, data=privacy_json(provenance)))
    return store_files(blobs, kind, out)


def store_files(
    blobs: BlobStore, kind: str, out: list[OutFile]
) -> tuple[str, int, str, list[dict[str, Any]]]:
    staged: list[StagedBlob] = []
    listed: list[dict[str, Any]] = []
    try:
        for f in out:
            if f.sha256 is not None:
                sha, size = f.sha256, blobs.size(f.sha256)
            else:
                chunks = f.chunks() if f.chunks is not None else iter([f.data or b""])
                item = blobs.stage(chunks)
                staged.append(item)
                sha, size = item.sha256, item.size
            listed.append({"path": f.path, "size": size, "sha256": sha})
        listed.sort(key=lambda f: f["path"])
        manifest = blobs.stage([manifest_bytes(kind, listed)])
        staged.append(manifest)
    except BaseException:
        for item in staged:
            blobs.discard(item)
        raise
    promote_all(blobs, staged)
    return manifest.sha256, sum(f["size"] for f in listed), kind, listed


def privacy_json(provenance: dict[str, str]) -> bytes:
    """The release's guarantee for tools: the provenance keys without their prefix."""
    record: dict[str, Any] = {k.removeprefix("retarget."): v for k, v in provenance.items()}
    for key in ("epsilon", "delta", "selection_epsilon"):
        if key in record:
            record[key] = float(record[key])
    record["weights"] = json.loads(record["weights"])
    if "uncertainty" in record:  # checkpoints of one run: a metric's spread over them
        record["uncertainty"] = json.loads(record["uncertainty"])
    return json.dumps(record, indent=2, sort_keys=True).encode() + b"\n"


def model_card(provenance: dict[str, str], kind: str) -> str:
    """The release's own model card: what was merged, under which guarantee."""
    p = provenance
    weights = json.loads(p["retarget.weights"])
    method = {
        "lc": "a linear combination",
        "rs": "random selection",
        "ensemble": "an ensemble of one run's checkpoints",
    }.get(p["retarget.method"], p["retarget.method"])
    rows = "\n".join(f"| `{m}` | {w:.6g} |" for m, w in sorted(weights.items()))
    what = (
        "one model drawn at random with these probabilities (which one stays secret)"
        if p["retarget.method"] == "rs"
        else "these checkpoints side by side under `members/`, their outputs combined at "
        f"inference by `{p.get('retarget.combine')}` with these weights (`ensemble.json`)"
        if p["retarget.method"] == "ensemble"
        else "the weighted sum of these models, tensor by tensor"
        + (
            " (LoRA adapters: exactly, as one adapter of the summed rank)"
            if kind == "peft_lora"
            else ""
        )
    )
    assumes = f"; assumes {p['retarget.assumptions']}" if "retarget.assumptions" in p else ""
    return f"""---
tags:
- differential-privacy
- retarget
---

# Release {p["retarget.release_id"]}

Released by Retarget {p["retarget.service_version"]} from dataset `{p["retarget.dataset_id"]}`
by {method}: {what}.

**Guarantee:** ({p["retarget.epsilon"]}, {p["retarget.delta"]})-differential privacy
with respect to the dataset, accountant `{p["retarget.accountant"]}`, bound
`{p["retarget.bound"]}`{assumes}.

| model | weight |
| --- | --- |
{rows}

`privacy.json` says the same for tools; every safetensors file of this release
that was written by the merge carries it in its `__metadata__` (`retarget.*` keys).
"""
