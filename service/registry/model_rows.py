"""A model's row: what it is (``ModelSpec``, validated) and how it is inserted (one
place for single files and bundles, so both answer a taken name or step alike)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.accounting.mechanisms import Mechanism, canonical_mechanism, mechanism_hash
from service.errors import Conflict
from service.registry.models import Model


@dataclass(frozen=True)
class ModelSpec:
    """Everything about a model but its bytes, already validated."""

    dataset_id: str
    name: str
    version: int
    mechanism: Mechanism
    run_id: str | None = None
    step: int | None = None
    metrics: dict[str, float] | None = None
    #: per metric: {"source": "prior" | "models" | "private", "sensitivity": float | None}
    metric_declarations: dict[str, Any] | None = None
    claimed_epsilon: float | None = None
    claimed_delta: float | None = None
    claim_check: str | None = None
    recomputed_epsilon: float | None = None
    architecture: dict[str, Any] | None = None
    #: checks the declaration against the tensor signature; raises to refuse the upload
    check_signature: Callable[[dict[str, Any]], object] | None = None


def model_row(spec: ModelSpec, verified: bool, **stored: Any) -> Model:
    """The row of a model described by ``spec``; ``stored`` is what storing its files
    gave (signature, its hash, sha256, size, and for bundles kind and files)."""
    return Model(
        dataset_id=spec.dataset_id,
        name=spec.name,
        version=spec.version,
        mechanism=canonical_mechanism(spec.mechanism),
        mechanism_type=spec.mechanism.type,
        mechanism_hash=mechanism_hash(spec.mechanism),
        lineage_run_id=spec.run_id,
        lineage_step=spec.step,
        lineage_verified=verified,
        metrics=dict(spec.metrics or {}),
        metric_declarations=spec.metric_declarations,
        claimed_epsilon=spec.claimed_epsilon,
        claimed_delta=spec.claimed_delta,
        claim_check=spec.claim_check,
        recomputed_epsilon=spec.recomputed_epsilon,
        architecture=spec.architecture,
        **stored,
    )


def insert_model(session: Session, model: Model, spec: ModelSpec) -> None:
    """Add the row; a taken (name, version) or (run, step), or bytes this dataset
    already holds (a copy, which is never a second independent run), is a 409 naming
    what it collides with."""
    first = session.scalar(
        select(Model)
        .where(
            Model.dataset_id == model.dataset_id,
            Model.sha256 == model.sha256,
            Model.duplicate_of.is_(None),
        )
        .limit(1)
    )
    if first is not None:
        raise _copy_of(first)
    session.add(model)
    try:
        session.flush()
    except IntegrityError as exc:
        session.rollback()
        if "uq_models_dataset_sha256" in str(exc.orig):
            raise Conflict(
                f"dataset {spec.dataset_id!r} already holds these exact bytes "
                f"(sha256 {model.sha256}): a copy is not a second run"
            ) from exc
        if spec.run_id is not None and "uq_models_run_step" in str(exc.orig):
            raise Conflict(
                f"lineage: run {spec.run_id!r} already has a checkpoint at step "
                f"{spec.step}; a run has one iterate per step"
            ) from exc
        raise Conflict(
            f"dataset {spec.dataset_id!r} already has model {spec.name!r} version {spec.version}"
        ) from exc


def _copy_of(first: Model) -> Conflict:
    return Conflict(
        f"model {first.name!r} v{first.version} ({first.id}) of this dataset has the same "
        f"bytes (sha256 {first.sha256}): registering them again would count one run's noise "
        "twice; use the existing model (a retrained checkpoint, even of the same setting, "
        "has other bytes)",
        model_id=first.id,
        sha256=first.sha256,
    )


def metric_sources(model: Model) -> dict[str, str]:
    """Each metric's declared source; a metric declared nothing counts as "models"
    (computed from the model: not public)."""
    declared = model.metric_declarations or {}
    return {k: str(declared.get(k, {}).get("source", "models")) for k in model.metrics or {}}


def visible_metrics(model: Model, *, show_all: bool) -> tuple[dict[str, float], list[str]]:
    """(the metric values a caller may see, the names of those hidden): values declared
    'prior' are public; the others are functions of the private model or of private
    data, shown only to admin keys (``show_all``), since a plan revealing just their
    argmax needs scope 'publish' and is charged (docs/utility.md)."""
    sources = metric_sources(model)
    shown = {
        k: float(v) for k, v in (model.metrics or {}).items() if show_all or sources[k] == "prior"
    }
    return shown, sorted(k for k in model.metrics or {} if k not in shown)
