"""``exist_ok``: creating what already exists, again, is answered with what exists.

A script that registers its datasets and models runs twice: the second run must find
the first run's rows rather than fail. What exists is returned only when it is the
same thing; the same name with other settings, bytes or metadata is still a 409 that
names the first difference, since returning it would hand the script something it did
not ask for (another cap, other weights, another mechanism and so another guarantee).
Deciding reads the upload's bytes once, to hash them; nothing is stored either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.mechanisms import canonical_mechanism
from service.errors import Conflict, PayloadTooLarge
from service.formats.streams import iter_file
from service.registry.model_rows import ModelSpec
from service.registry.models import Dataset, Model


def same_dataset(dataset: Dataset, settings: dict[str, Any]) -> Dataset:
    """``dataset`` when its settings are ``settings`` (the request's, every field);
    ``Conflict`` naming the first that differs."""
    for field, wanted in settings.items():
        if field == "name":
            continue
        have = getattr(dataset, field)
        if have != wanted:
            raise Conflict(
                f"a dataset named {dataset.name!r} already exists with another {field} "
                f"({have!r}, not {wanted!r})",
                field=field,
            )
    return dataset


def taken(session: Session, spec: ModelSpec) -> Model | None:
    """The model already registered at the spec's (dataset, name, version), if any."""
    return session.scalar(
        select(Model).where(
            Model.dataset_id == spec.dataset_id,
            Model.name == spec.name,
            Model.version == spec.version,
        )
    )


def stream_sha256(chunks: Iterable[bytes], max_bytes: int | None) -> str:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            raise PayloadTooLarge(f"the upload is larger than the limit of {max_bytes} bytes")
        digest.update(chunk)
    return digest.hexdigest()


def same_model(
    existing: Model,
    spec: ModelSpec,
    *,
    chunks: Iterable[bytes] | None = None,
    files: list[tuple[str, IO[bytes]]] | None = None,
    max_bytes: int | None = None,
) -> Model:
    """``existing`` when the upload (one file's ``chunks`` or a bundle's ``files``) and
    ``spec`` are what it holds; ``Conflict`` naming what differs otherwise."""
    label = f"model {spec.name!r} version {spec.version}"
    metadata = {
        "mechanism": (canonical_mechanism(spec.mechanism), existing.mechanism),
        "lineage.run_id": (spec.run_id, existing.lineage_run_id),
        "lineage.step": (spec.step, existing.lineage_step),
        "metrics": (dict(spec.metrics or {}), dict(existing.metrics or {})),
        "claimed.epsilon": (spec.claimed_epsilon, existing.claimed_epsilon),
        "claimed.delta": (spec.claimed_delta, existing.claimed_delta),
        "architecture": (spec.architecture, existing.architecture),
    }
    for field, (wanted, have) in metadata.items():
        if wanted != have:
            raise Conflict(
                f"{label} already exists with another {field}; register this one under "
                "another name or version",
                field=field,
            )
    if files is not None:
        sent = sorted((path, stream_sha256(iter_file(fh), max_bytes)) for path, fh in files)
        stored = sorted((f["path"], f["sha256"]) for f in existing.files or [])
        if sent != stored:
            raise Conflict(f"{label} already exists with other files", field="files")
    elif chunks is not None:
        if existing.files is not None:
            raise Conflict(f"{label} already exists as a {existing.kind} bundle", field="files")
        if stream_sha256(chunks, max_bytes) != existing.sha256:
            raise Conflict(
                f"{label} already exists with other weights (sha256 {existing.sha256})",
                field="sha256",
            )
    return existing
