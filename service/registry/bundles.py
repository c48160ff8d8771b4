"""Registering a bundle: many files, each a blob, one model row.

Each file is streamed into a staged blob (never whole in memory), the weights
are checked (every shard a valid safetensors file of float tensors, the index
naming exactly the shards sent and the tensors they hold, an adapter's
configuration a LoRA the exact LC supports), the manifest (kind and files) is
stored as one more blob whose sha256 is the model's, and the row is inserted;
the blobs are moved into place and the row committed only when all of it holds.

``register_uploaded_bundle`` does the same for files the caller's key uploaded one
by one beforehand (``registry/uploads.py``: a resumable upload), named by sha256.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.mechanisms import canonical_json
from service.errors import InvalidInput, InvalidUpload, PayloadTooLarge
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
from service.formats.shapes import CONFIG, check_config_shapes
from service.formats.streams import iter_file
from service.registry import repository
from service.registry.blobs import BlobStore, StagedBlob
from service.registry.model_rows import insert_model, model_row
from service.registry.models import Model, Upload
from service.registry.uploads import consume


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
    with _lineage_lock(session, spec):
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
            model, manifest = _bundle_row(session, blobs, spec, verified, kind, staged)
            staged["\x00manifest"] = manifest
        except BaseException:
            for item in staged.values():
                blobs.discard(item)
            raise
        promote_all(blobs, staged.values())
        _commit(session)
        return model


def register_uploaded_bundle(
    *,
    session: Session,
    blobs: BlobStore,
    spec: repository.ModelSpec,
    files: list[tuple[str, str]],
    owner: str,
    max_bytes: int | None = None,
) -> Model:
    """A bundle whose files ``owner`` uploaded beforehand (``registry/uploads.py``),
    named by (path, sha256): checked exactly as ``register_bundle`` checks uploaded
    parts, stored with one more blob (the manifest), the uploads consumed in the same
    transaction. ``InvalidInput`` with ``missing`` (sha256s) when some are not there."""
    kind = bundle_kind([path for path, _ in files])
    shas = [sha for _, sha in files]
    with _lineage_lock(session, spec):
        repository._check_model_free(session, spec)
        verified = repository.verify_lineage(session, spec)
        have = set(
            session.scalars(
                select(Upload.sha256).where(Upload.owner == owner, Upload.sha256.in_(set(shas)))
            )
        )
        absent = [sha for sha in dict.fromkeys(shas) if sha not in have or not blobs.exists(sha)]
        if absent:
            raise InvalidInput(
                f"{len(absent)} of the bundle's files were not uploaded by this key (or have "
                "expired): PUT /v1/uploads/{sha256} each, then register again",
                missing=absent,
            )
        staged = {
            path: StagedBlob(path=blobs.local_path(sha), sha256=sha, size=blobs.size(sha))
            for path, sha in files
        }
        total = sum(item.size for item in staged.values())
        if max_bytes is not None and total > max_bytes:
            raise PayloadTooLarge(
                f"the bundle is larger than the limit of {max_bytes} bytes", limit=max_bytes
            )
        model, manifest = _bundle_row(session, blobs, spec, verified, kind, staged)
        try:
            consume(session=session, owner=owner, shas=shas)
        except BaseException:
            blobs.discard(manifest)
            raise
        promote_all(blobs, [manifest])
        _commit(session)
        return model


def _lineage_lock(session: Session, spec: repository.ModelSpec) -> Any:
    if spec.run_id is None:
        return nullcontext()
    return repository.dataset_lock(session, f"lineage\x00{spec.dataset_id}\x00{spec.run_id}")


def _bundle_row(
    session: Session,
    blobs: BlobStore,
    spec: repository.ModelSpec,
    verified: bool,
    kind: str,
    staged: dict[str, StagedBlob],
) -> tuple[Model, StagedBlob]:
    """Check the files, stage the manifest and insert the row (flushed): the model and
    the manifest's staged blob (discarded again if the row cannot be inserted)."""
    signature = bundle_signature(kind, staged)
    if spec.check_signature is not None:
        spec.check_signature(signature)
    listed = [{"path": p, "size": s.size, "sha256": s.sha256} for p, s in sorted(staged.items())]
    manifest = blobs.stage([manifest_bytes(kind, listed)])
    try:
        model = model_row(
            spec,
            verified,
            signature=signature,
            signature_hash=bundle_signature_hash(kind, signature),
            sha256=manifest.sha256,
            size_bytes=sum(s.size for s in staged.values()),
            kind=kind,
            files=listed,
        )
        insert_model(session, model, spec)
    except BaseException:
        blobs.discard(manifest)
        raise
    return model, manifest


def _commit(session: Session) -> None:
    try:
        session.commit()
    except BaseException:
        # the blobs stay: content-addressed, other bundles may hold the same bytes
        session.rollback()
        raise


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
    if CONFIG in staged:  # shapes the configuration determines, as a loader checks them
        check_config_shapes(load_json(staged[CONFIG].path, CONFIG), signature, holder)
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
