"""A release's files: the merge (or the drawn model) that a release stores.

Separate from the planning in ``service.releases.retarget`` so that a merge job can
rebuild it from the stored release alone (``service.releases.merge_jobs``).
"""

from __future__ import annotations

from typing import Any

from service.errors import StorageError
from service.merging.base import MergeInput
from service.merging.linear import LinearMerge
from service.merging.registry import METHODS
from service.registry.blobs import BlobStore
from service.registry.models import Model
from service.releases.bundles import is_bundle_release, release_bundle
from service.releases.ensembles import release_ensemble

MERGE_FOR = {"lc": "linear", "checkpoint_average": "checkpoint_average"}

#: what a release stores: (sha256, size, kind, files)
Artifact = tuple[str, int, str, list[dict[str, Any]] | None]


def produce(
    *,
    blobs: BlobStore,
    models: dict[str, Model],
    method: str,
    weights: dict[str, float],
    drawn: str | None,
    out_dtype: str | None,
    max_shard_size: int | None,
    provenance: dict[str, str],
) -> Artifact:
    """The release's files, merged (or drawn, or cast) and stored in ``blobs``; an
    ensemble's members as they are, with its manifest (``service.releases.ensembles``)."""
    if method == "ensemble":
        return release_ensemble(blobs=blobs, models=models, weights=weights, provenance=provenance)
    if is_bundle_release(models):
        return release_bundle(
            blobs=blobs,
            models=models,
            weights=weights,
            drawn=drawn,
            out_dtype=out_dtype,
            max_shard_size=max_shard_size,
            provenance=provenance,
        )
    if drawn is not None and out_dtype is None:
        return models[drawn].sha256, models[drawn].size_bytes, "safetensors", None
    if drawn is not None:  # the drawn model, cast (weight 1: exact up to the cast)
        cast = LinearMerge(out_dtype=out_dtype)
        return (*merge(blobs, cast, models, {drawn: 1.0}, [drawn], provenance), "safetensors", None)
    merger = (
        LinearMerge(out_dtype=out_dtype) if out_dtype is not None else METHODS[MERGE_FOR[method]]()
    )
    sha, size = merge(blobs, merger, models, weights, sorted(weights), provenance)
    return sha, size, "safetensors", None


def merge(
    blobs: BlobStore,
    method: Any,
    models: dict[str, Model],
    weights: dict[str, float],
    ordered: list[str],
    provenance: dict[str, str],
) -> tuple[str, int]:
    """Stream the merge into a staged blob and move it into place (both or nothing)."""
    inputs = []
    for mid in ordered:
        path = blobs.local_path(models[mid].sha256)
        if not path.is_file():
            raise StorageError(f"the weights of model {mid!r} are missing from the store")
        inputs.append(MergeInput(path, weights[mid], models[mid].name or mid))
    staged = blobs.stage(method.chunks(inputs, provenance))
    blobs.promote(staged)
    return staged.sha256, staged.size
