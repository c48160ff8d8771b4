"""A model's row: what it is (``ModelSpec``, validated) and how it is inserted (one
place for single files and bundles, so both answer a taken name or step alike)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
        claimed_epsilon=spec.claimed_epsilon,
        claimed_delta=spec.claimed_delta,
        claim_check=spec.claim_check,
        recomputed_epsilon=spec.recomputed_epsilon,
        architecture=spec.architecture,
        **stored,
    )


def insert_model(session: Session, model: Model, spec: ModelSpec) -> None:
    """Add the row; a taken (name, version) or (run, step) is a 409 naming it."""
    session.add(model)
    try:
        session.flush()
    except IntegrityError as exc:
        session.rollback()
        if spec.run_id is not None and "uq_models_run_step" in str(exc.orig):
            raise Conflict(
                f"lineage: run {spec.run_id!r} already has a checkpoint at step "
                f"{spec.step}; a run has one iterate per step"
            ) from exc
        raise Conflict(
            f"dataset {spec.dataset_id!r} already has model {spec.name!r} version {spec.version}"
        ) from exc
