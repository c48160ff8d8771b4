"""One file of a registered model: a bundle's shard, index, adapter or sidecar (or
``model.safetensors`` of a single-file model), for ``retarget models download``.

Like ``GET /v1/models/{id}/weights``: the private input itself, scope
``models:download``, each download (not a 304) recorded in the dataset's ledger as an
exposure of the model and refused with 409 when the ledger's bound would then pass
the cap. Every file of the model is charged, sidecars included: what a file reveals
is not judged here, and charging the same model again changes no bound (the ledger
counts each exposed model once).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from service.api.blob_responses import (
    CHARGED_DOWNLOAD_RESPONSES,
    blob_response,
    not_modified,
)
from service.api.context import Principal
from service.api.deps import ContextDep, require
from service.api.routes.jobs import job_or_queued, pending_response
from service.errors import NotFound, ProfilesPending, StorageError
from service.ledger.charges import expose
from service.registry import repository
from service.registry.db import session_scope
from service.registry.keys import DOWNLOAD_SCOPE

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get(
    "/{model_id}/files/{path:path}",
    operation_id="models_download_file",
    response_class=Response,
    responses=CHARGED_DOWNLOAD_RESPONSES,
)
def get_model_file(
    model_id: str,
    path: Annotated[str, Path(max_length=512)],
    request: Request,
    ctx: ContextDep,
    who: Annotated[Principal, require(DOWNLOAD_SCOPE)],
) -> Response:
    """One file of the model's raw weights (ETag = its sha256, If-None-Match, Range);
    charged to the dataset's ledger as ``/weights`` is."""
    try:
        with session_scope(ctx.session_factory) as session:
            model = repository.get_model(session=session, model_id=model_id)
            files = model.files or [
                {"path": "model.safetensors", "size": model.size_bytes, "sha256": model.sha256}
            ]
            found = [f for f in files if f["path"] == path]
            if not found:
                raise NotFound(f"model {model_id!r} has no file {path!r}")
            sha = str(found[0]["sha256"])
            if not not_modified(request, sha):
                if not ctx.blobs.exists(sha):
                    raise StorageError(f"blob {sha} is missing from the store")
                expose(
                    session=session,
                    profiles=ctx.profiles,
                    dataset_id=model.dataset_id,
                    kind="download",
                    model_ids=[model_id],
                    key_id=who.key_id,
                    key_name=who.name,
                )
    except ProfilesPending as exc:
        return pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
    return blob_response(request, ctx.blobs, sha, path.rsplit("/", 1)[-1])
