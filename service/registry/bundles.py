"""Registering a bundle: many files, each a blob, one model row.

Each file is streamed into a staged blob (never whole in memory), the weights
are checked (every shard a valid safetensors file of float tensors, the index
naming exactly the shards sent and the tensors they hold, an adapter's
configuration a LoRA the exact LC supports), the manifest (kind and files) is
stored as one more blob whose sha256 is the model's, and the row is inserted;
the blobs are moved into place and the row committed only when all of it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from typing import IO, Any

from sqlalchemy.orm import Session

from service.accounting.mechanisms import canonical_json
from service.errors import InvalidUpload, PayloadTooLarge
from service.formats.bundles import (
    ADAPTER_CONFIG,
    INDEX_SUFFIX,
    bundle_kind,
    bundle_signature_hash,
    check_lora_tensors,
    index_shards,
    load_json,
    lora_config,
)
from service.formats.checkpoints import read_signature
from service.formats.streams import iter_file
from service.registry import repository
from service.registry.blobs import BlobStore, StagedBlob
from service.registry.model_rows import insert_model, model_row
from service.registry.models import Model


def manifest_bytes(kind: str, files: list[dict[str, Any]]) -> bytes:
    return canonical_json({"kind": kind, "files": files}).encode()


def register_bundle(
    *,
    session: Session,
    blobs: BlobStore,
    spec: repository.ModelSpec,
    files: list[tuple[str, IO[bytes]]],
    max_bytes: int | None = None,
) -> Model:
    """Store a bundle's files and its row, all or nothing (as ``register_model``).
    ``max_bytes`` bounds the whole bundle."""
    kind = bundle_kind([path for path, _ in files])
    lock = (
        repository.dataset_lock(session, f"lineage\x00{spec.dataset_id}\x00{spec.run_id}")
        if spec.run_id is not None
        else nullcontext()
    )
    with lock:
        repository._check_model_free(session, spec)
        verified = repository.verify_lineage(session, spec)
        staged: dict[str, StagedBlob] = {}
        try:
            total = 0
            for path, fh in files:
                left = None if max_bytes is None else max_bytes - total
                try:
                    staged[path] = blobs.stage(iter_file(fh), max_bytes=left)
                except PayloadTooLarge as exc:
                    raise PayloadTooLarge(
                        f"the bundle is larger than the limit of {max_bytes} bytes",
                        limit=max_bytes,
                    ) from exc
                total += staged[path].size
            signature = bundle_signature(kind, staged)
            if spec.check_signature is not None:
                spec.check_signature(signature)
            listed = [
                {"path": p, "size": s.size, "sha256": s.sha256} for p, s in sorted(staged.items())
            ]
            manifest = blobs.stage([manifest_bytes(kind, listed)])
            staged["\x00manifest"] = manifest
            model = model_row(
                spec,
                verified,
                signature=signature,
                signature_hash=bundle_signature_hash(kind, signature),
                sha256=manifest.sha256,
                size_bytes=total,
                kind=kind,
                files=listed,
            )
            insert_model(session, model, spec)
        except BaseException:
            for item in staged.values():
                blobs.discard(item)
            raise
        promote_all(blobs, staged.values())
        try:
            session.commit()
        except BaseException:
            # the blobs stay: content-addressed, other bundles may hold the same bytes
            session.rollback()
            raise
        return model


def promote_all(blobs: BlobStore, staged: Iterable[StagedBlob]) -> None:
    """Move staged blobs into place; if one fails, the rest are discarded."""
    items = list(staged)
    done = 0
    try:
        for item in items:
            blobs.promote(item)
            done += 1
    except BaseException:
        for rest in items[done + 1 :]:
            blobs.discard(rest)
        raise


def bundle_signature(kind: str, staged: dict[str, StagedBlob]) -> dict[str, Any]:
    """One signature over every tensor of every shard; the index and the adapter
    configuration checked against the shards."""
    shards = sorted(p for p in staged if p.endswith(".safetensors"))
    signature: dict[str, Any] = {}
    holder: dict[str, str] = {}
    for shard in shards:
        try:
            tensors = read_signature(staged[shard].path)
        except InvalidUpload as exc:
            raise InvalidUpload(f"{shard}: {exc}", **{**exc.extra, "path": shard}) from exc
        for name, entry in tensors.items():
            if name in holder:
                raise InvalidUpload(
                    f"tensor {name!r} is in both {holder[name]} and {shard}", tensors=[name]
                )
            holder[name] = shard
            signature[name] = entry
    if kind == "peft_lora":
        config = lora_config(load_json(staged[ADAPTER_CONFIG].path, ADAPTER_CONFIG))
        check_lora_tensors(signature, int(config["r"]))
        del holder  # one weights file: nothing to index
        return dict(sorted(signature.items()))
    indexes = [p for p in staged if p.endswith(INDEX_SUFFIX)]
    if len(indexes) > 1:
        raise InvalidUpload(f"a bundle holds one safetensors index, got {sorted(indexes)}")
    if not indexes:
        if len(shards) > 1:
            raise InvalidUpload(
                f"{len(shards)} safetensors files but no *{INDEX_SUFFIX} saying which "
                "tensor each holds"
            )
        return dict(sorted(signature.items()))
    index = indexes[0]
    weight_map = index_shards(load_json(staged[index].path, index), index)
    if set(weight_map.values()) != set(shards):
        raise InvalidUpload(
            f"{index} names shards {sorted(set(weight_map.values()))}, the bundle holds {shards}",
            path=index,
        )
    wrong = sorted(n for n in set(weight_map) | set(holder) if weight_map.get(n) != holder.get(n))
    if wrong:
        raise InvalidUpload(
            f"{index} does not match the shards for tensors {wrong[:5]}",
            path=index,
            tensors=wrong[:50],
        )
    return dict(sorted(signature.items()))
