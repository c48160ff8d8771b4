"""How a registered model is shown: what each key may see of it."""

from __future__ import annotations

from service.accounting.conversions import round_up
from service.api.schemas import BundleFile, Claimed, Lineage, MetricDeclaration, ModelPublic
from service.registry.model_rows import visible_metrics
from service.registry.models import Model


def to_public(model: Model, *, show_all: bool = True) -> ModelPublic:
    """The model as a caller sees it: metrics not declared 'prior' only with ``show_all``
    (admin keys)."""
    metrics, hidden = visible_metrics(model, show_all=show_all)
    declared = model.metric_declarations or {}
    return ModelPublic(
        id=model.id,
        dataset_id=model.dataset_id,
        name=model.name,
        version=model.version,
        mechanism=model.mechanism,
        mechanism_hash=model.mechanism_hash,
        lineage=(
            Lineage(run_id=model.lineage_run_id, step=model.lineage_step)
            if model.lineage_run_id is not None
            else None
        ),
        lineage_verified=bool(model.lineage_verified),
        signature=model.signature,
        signature_hash=model.signature_hash,
        sha256=model.sha256,
        size_bytes=model.size_bytes,
        metrics=metrics,
        hidden_metrics=hidden,
        metric_declarations={k: MetricDeclaration(**v) for k, v in declared.items()},
        duplicate_of=model.duplicate_of,
        architecture=model.architecture,
        claimed=(
            Claimed(epsilon=model.claimed_epsilon, delta=model.claimed_delta)
            if model.claimed_epsilon is not None and model.claimed_delta is not None
            else None
        ),
        claim_check=model.claim_check,
        recomputed_epsilon=(
            round_up(model.recomputed_epsilon) if model.recomputed_epsilon is not None else None
        ),
        created_at=model.created_at,
        download_url=f"/v1/models/{model.id}/weights",
        kind=model.kind,
        files=[BundleFile(**f) for f in model.files] if model.files is not None else None,
        retired_at=model.retired_at,
        retired_reason=model.retired_reason,
    )
