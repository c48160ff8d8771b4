"""Repository functions: plain, keyword-only, one transaction boundary each.

They flush but do not commit, except ``register_model`` and ``set_validation``,
which own the order of blob and row writes so that neither is ever left without the other.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from sqlalchemy import String, cast, func, select, text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from service.accounting.mechanisms import (
    parse_mechanism,
)
from service.accounting.mechanisms.lineage import PER_STEP_TYPES, lineage_steps, prefix_mismatch
from service.errors import Busy, Conflict, InvalidInput, NotFound
from service.formats.checkpoints import read_signature, signature_hash
from service.registry.blobs import BlobStore, StagedBlob
from service.registry.model_rows import ModelSpec, insert_model, model_row
from service.registry.models import Dataset, Model, Release
from service.registry.sqlite_lock import sqlite_write_transaction


def create_dataset(
    *,
    session: Session,
    name: str,
    description: str | None = None,
    metric: str | None = None,
    metric_goal: str | None = None,
    epsilon_cap: float | None = None,
    delta_cap: float | None = None,
) -> Dataset:
    if session.scalar(select(Dataset.id).where(Dataset.name == name)) is not None:
        raise Conflict(f"a dataset named {name!r} already exists")
    dataset = Dataset(
        name=name,
        description=description,
        metric=metric,
        metric_goal=metric_goal,
        epsilon_cap=epsilon_cap,
        delta_cap=delta_cap,
    )
    session.add(dataset)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError as exc:
        raise Conflict(f"a dataset named {name!r} already exists") from exc
    return dataset


def get_dataset(*, session: Session, dataset_id: str) -> Dataset:
    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        raise NotFound(f"no dataset with id {dataset_id!r}")
    return dataset


def dataset_named(*, session: Session, name: str) -> Dataset | None:
    return session.scalar(select(Dataset).where(Dataset.name == name))


def list_datasets(*, session: Session, offset: int, limit: int) -> tuple[list[Dataset], int]:
    total = session.scalar(select(func.count()).select_from(Dataset)) or 0
    rows = session.scalars(
        select(Dataset).order_by(Dataset.created_at, Dataset.id).offset(offset).limit(limit)
    )
    return list(rows), total


def get_model(*, session: Session, model_id: str) -> Model:
    model = session.get(Model, model_id)
    if model is None:
        raise NotFound(f"no model with id {model_id!r}")
    return model


def list_models(
    *, session: Session, dataset_id: str | None, offset: int, limit: int
) -> tuple[list[Model], int]:
    query = select(Model)
    count = select(func.count()).select_from(Model)
    if dataset_id is not None:
        query = query.where(Model.dataset_id == dataset_id)
        count = count.where(Model.dataset_id == dataset_id)
    total = session.scalar(count) or 0
    rows = session.scalars(query.order_by(Model.created_at, Model.id).offset(offset).limit(limit))
    return list(rows), total


def _check_model_free(session: Session, spec: ModelSpec) -> None:
    get_dataset(session=session, dataset_id=spec.dataset_id)
    taken = session.scalar(
        select(Model.id).where(
            Model.dataset_id == spec.dataset_id,
            Model.name == spec.name,
            Model.version == spec.version,
        )
    )
    if taken is not None:
        raise Conflict(
            f"dataset {spec.dataset_id!r} already has model {spec.name!r} version {spec.version}"
        )


def register_model(
    *,
    session: Session,
    blobs: BlobStore,
    spec: ModelSpec,
    chunks: Iterable[bytes],
    max_bytes: int | None = None,
) -> Model:
    """Store a checkpoint and its row, both or neither.

    Order: refuse an unknown dataset or a taken name before reading any bytes;
    stage the bytes in a temporary file; parse them as safetensors; insert the
    row (flush); move the blob into place; commit. Any failure before the move
    leaves no blob; a failed commit removes a blob this call created and no row
    references.
    """
    lock = (
        dataset_lock(session, f"lineage\x00{spec.dataset_id}\x00{spec.run_id}", sqlite_write=False)
        if spec.run_id is not None
        else nullcontext()
    )
    with lock:  # registrations of one run pass the lineage check one at a time
        _check_model_free(session, spec)
        verified = verify_lineage(session, spec)
        return _store_model(session, blobs, spec, chunks, max_bytes, verified)


def verify_lineage(session: Session, spec: ModelSpec) -> bool:
    """Check a checkpoint of a run against the run's verified checkpoints (``False``:
    the model names no run). ``InvalidInput`` naming the first mismatch otherwise.

    The step must be given and equal the mechanism's number of steps
    (``service.accounting.mechanisms.lineage.lineage_steps``); every verified checkpoint of the
    run at an earlier or equal step must be a prefix of this mechanism, and this one a
    prefix of every later one. Call it under the run's lock."""
    if spec.run_id is None:
        return False
    run = f"run {spec.run_id!r}"
    if spec.mechanism.type not in PER_STEP_TYPES:
        raise InvalidInput(
            f"lineage: a {spec.mechanism.type!r} mechanism cannot be a checkpoint of {run} "
            f"(only {', '.join(PER_STEP_TYPES)} have per-step prefixes); drop lineage to "
            "register it as an independent model"
        )
    steps = lineage_steps(spec.mechanism)
    if spec.step is None:
        raise InvalidInput(
            f"lineage: a checkpoint of {run} must give lineage.step (here {steps}, the "
            "mechanism's number of steps)"
        )
    if spec.step != steps:
        raise InvalidInput(
            f"lineage: step {spec.step} of {run} is not the mechanism's number of steps "
            f"({steps}); a checkpoint's mechanism describes the steps that produced it"
        )
    rows = session.execute(
        select(Model.id, Model.name, Model.version, Model.lineage_step, Model.mechanism)
        .where(
            Model.dataset_id == spec.dataset_id,
            Model.lineage_run_id == spec.run_id,
            Model.lineage_verified.is_(True),
        )
        .order_by(Model.lineage_step, Model.created_at, Model.id)
    ).all()
    for model_id, name, version, step, _ in rows:
        if step == spec.step:
            raise Conflict(
                f"lineage: {run} already has a checkpoint at step {step}: {model_id!r} "
                f"({name!r} v{version}); a run has one iterate per step, so register "
                "another run under its own run_id",
                model_id=model_id,
                step=step,
            )
    for model_id, name, version, step, stored in rows:
        other = parse_mechanism(stored)
        if (step or 0) <= spec.step:
            why = prefix_mismatch(other, spec.mechanism)
            relation = "is not a prefix of this one"
        else:
            why = prefix_mismatch(spec.mechanism, other)
            relation = "does not extend this one"
        if why is not None:
            raise InvalidInput(
                f"lineage: checkpoint {model_id!r} ({name!r} v{version}, step {step}) of "
                f"{run} {relation}: {why}",
                model_id=model_id,
                step=step,
            )
    return True


def _store_model(
    session: Session,
    blobs: BlobStore,
    spec: ModelSpec,
    chunks: Iterable[bytes],
    max_bytes: int | None,
    verified: bool,
) -> Model:
    staged = blobs.stage(chunks, max_bytes=max_bytes)
    try:
        signature = read_signature(staged.path)
        if spec.check_signature is not None:
            spec.check_signature(signature)
        model = model_row(
            spec,
            verified,
            signature=signature,
            signature_hash=signature_hash(signature),
            sha256=staged.sha256,
            size_bytes=staged.size,
        )
        insert_model(session, model, spec)
    except BaseException:
        blobs.discard(staged)
        raise
    _promote_and_commit(session, blobs, staged)
    return model


def _promote_and_commit(session: Session, blobs: BlobStore, staged: StagedBlob) -> None:
    """Move the staged blob into place, then commit; if the commit fails, remove the
    blob again unless something else already refers to those bytes."""
    created = blobs.promote(staged)
    try:
        session.commit()
    except BaseException:
        session.rollback()
        if created and not _blob_referenced(session, staged.sha256):
            blobs.delete(staged.sha256)
        raise


def _blob_referenced(session: Session, sha256: str) -> bool:
    """Whether any row names these bytes: a model's or release's file, a validation
    split, or one file of a bundle (model or release; their ``files`` JSON lists). Only
    asked on the failure path, so scanning the file lists as text is affordable; a
    sha256 is hex, so it has no LIKE wildcard to escape."""
    for column in (Model.sha256, Release.sha256, Dataset.validation_sha256):
        if session.scalar(select(column).where(column == sha256).limit(1)) is not None:
            return True
    for files in (Model.files, Release.files):
        listed = select(files).where(cast(files, String).like(f'%"{sha256}"%')).limit(1)
        if session.scalar(listed) is not None:
            return True
    return False


def set_validation(
    *,
    session: Session,
    blobs: BlobStore,
    dataset_id: str,
    chunks: Iterable[bytes],
    check: Callable[[Path], int],
    max_bytes: int | None = None,
) -> Dataset:
    """Store a dataset's public validation split (replacing any earlier one), both the
    blob and the row or neither. ``check`` parses the staged file and returns its
    number of examples, or raises to refuse it."""
    dataset = get_dataset(session=session, dataset_id=dataset_id)
    staged = blobs.stage(chunks, max_bytes=max_bytes)
    try:
        examples = check(staged.path)
    except BaseException:
        blobs.discard(staged)
        raise
    dataset.validation_sha256 = staged.sha256
    dataset.validation_examples = examples
    _promote_and_commit(session, blobs, staged)
    return dataset


# ---- releases ---------------------------------------------------------------------

_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_GUARD = threading.Lock()


#: How long a release waits for its dataset's lock before answering Busy (429).
LOCK_TIMEOUT_S = 30.0


@contextmanager
def dataset_lock(
    session: Session, dataset_id: str, timeout_s: float | None = None, *, sqlite_write: bool = True
) -> Iterator[None]:
    """Serialise releases of one dataset: a process lock and, until the session's
    transaction ends (so a check and the record it allows are one atomic step, across
    API processes): on Postgres a transaction-scoped advisory lock, on SQLite the
    database's write lock (``BEGIN IMMEDIATE``; ``sqlite_write=False`` for callers
    that commit inside the lock). Waits at most ``timeout_s`` (default
    ``LOCK_TIMEOUT_S``) for the process lock, then raises ``Busy``: the caller
    retries later."""
    wait = LOCK_TIMEOUT_S if timeout_s is None else timeout_s
    with _PROCESS_GUARD:
        lock = _PROCESS_LOCKS.setdefault(dataset_id, threading.Lock())
    if not lock.acquire(timeout=wait):
        raise Busy(f"dataset {dataset_id!r} is busy with another release; retry shortly")
    try:
        if session.get_bind().dialect.name == "postgresql":
            key = int.from_bytes(
                hashlib.sha256(dataset_id.encode()).digest()[:8], "big", signed=True
            )
            session.execute(text(f"SET LOCAL lock_timeout = '{int(wait * 1000)}ms'"))
            try:
                session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            except OperationalError as exc:
                if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available
                    raise Busy(
                        f"dataset {dataset_id!r} is busy with another release; retry shortly"
                    ) from exc
                raise
        elif sqlite_write:
            sqlite_write_transaction(session, dataset_id)
        yield
    finally:
        lock.release()


def get_release(*, session: Session, release_id: str) -> Release:
    release = session.get(Release, release_id)
    if release is None:
        raise NotFound(f"no release with id {release_id!r}")
    return release


def release_by_request(*, session: Session, request_hash: str) -> Release | None:
    return session.scalar(select(Release).where(Release.request_hash == request_hash))


def list_releases(*, session: Session, dataset_id: str) -> list[Release]:
    return list(
        session.scalars(
            select(Release)
            .where(Release.dataset_id == dataset_id)
            .order_by(Release.created_at, Release.id)
        )
    )


def page_releases(
    *, session: Session, dataset_id: str | None, offset: int, limit: int
) -> tuple[list[Release], int]:
    """One page of releases, newest first (of one dataset, or all), and how many there are."""
    query = select(Release)
    count = select(func.count()).select_from(Release)
    if dataset_id is not None:
        query = query.where(Release.dataset_id == dataset_id)
        count = count.where(Release.dataset_id == dataset_id)
    total = session.scalar(count) or 0
    order = (Release.created_at.desc(), Release.id.desc())
    return list(session.scalars(query.order_by(*order).offset(offset).limit(limit))), total


def models_by_id(*, session: Session, model_ids: Iterable[str]) -> dict[str, Model]:
    ids = list(model_ids)
    if not ids:
        return {}
    return {m.id: m for m in session.scalars(select(Model).where(Model.id.in_(ids)))}
