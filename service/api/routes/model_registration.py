"""Registering a model: a checkpoint, a bundle (file parts, or uploaded beforehand), or a
reference; nothing is stored unless all of it is valid."""

from __future__ import annotations

import logging
from contextlib import aclosing
from typing import IO, Annotated

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException

from service.accounting.cost import refusal
from service.api.context import Principal
from service.api.deps import AppContext, ContextDep, require
from service.api.naming import ExistOk, dataset_id_of, existing_model, labelled
from service.api.routes.model_uploads import UPLOAD_BODY, parse_metadata
from service.api.routes.model_views import to_public
from service.api.routes.plans import RECENT as RECENT_PLANS
from service.api.schemas import ModelCreate, ModelPublic, Problem
from service.api.spooling import staged_form
from service.errors import InvalidInput, PayloadTooLarge, ProfileTooCostly, StorageError
from service.formats.bundles import MAX_FILES
from service.formats.shapes import check_complete_shards
from service.formats.streams import iter_file
from service.plans.planner import lc_released
from service.profiles.cache import cost_limits
from service.profiles.claims import apply_claim_checks
from service.registry import repository
from service.registry.bundles import register_bundle, register_uploaded_bundle
from service.registry.db import session_scope
from service.registry.references import open_reference
from service.registry.uploads import owner_of

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/models", tags=["models"])


def _register(
    ctx: AppContext,
    meta: ModelCreate,
    weights: IO[bytes] | None,
    files: list[tuple[str, IO[bytes]]] | None = None,
    owner: str | None = None,
    exist_ok: bool = False,
) -> ModelPublic | JSONResponse:
    reason = refusal(meta.mechanism, cost_limits(ctx.settings))
    if reason is not None:
        raise ProfileTooCostly(f"mechanism refused: {reason}")
    spec = repository.ModelSpec(
        dataset_id=dataset_id_of(ctx, meta.dataset_id),
        name=meta.name,
        version=meta.version,
        mechanism=meta.mechanism,
        run_id=meta.lineage.run_id if meta.lineage else None,
        step=meta.lineage.step if meta.lineage else None,
        metrics=meta.metrics,
        metric_declarations={k: v.model_dump() for k, v in meta.metric_declarations.items()}
        or None,
        claimed_epsilon=meta.claimed.epsilon if meta.claimed else None,
        claimed_delta=meta.claimed.delta if meta.claimed else None,
        architecture=meta.architecture.model_dump() if meta.architecture else None,
        check_signature=meta.architecture.check if meta.architecture else None,
    )
    found = existing_model(ctx, meta, spec, weights, files, to_public) if exist_ok else None
    if found is not None:
        return JSONResponse(found.model_dump(mode="json"), status_code=200)
    with session_scope(ctx.session_factory) as session:
        limit = ctx.settings.max_upload_bytes
        model_id = (
            register_uploaded_bundle(
                session=session,
                blobs=ctx.blobs,
                spec=spec,
                files=[(f.path, f.sha256) for f in meta.files],
                owner=owner,
                max_bytes=limit,
            ).id
            if meta.files is not None and owner is not None
            else register_bundle(
                session=session, blobs=ctx.blobs, spec=spec, files=files, max_bytes=limit
            ).id
            if files is not None
            else repository.register_model(
                session=session,
                blobs=ctx.blobs,
                spec=spec,
                chunks=(
                    iter_file(weights)
                    if weights is not None
                    else open_reference(str(meta.weights_uri), ctx.settings, ctx.blobs)
                ),
                max_bytes=limit,
            ).id
        )
    RECENT_PLANS.clear()  # plans of this dataset now have another candidate
    ctx.plan_jobs.clear()
    # The profile job (in process: done now, claim checked; on a worker: queued). A
    # cache or queue outage never undoes a registration: the next request enqueues.
    try:
        profile, _ = ctx.profiles.profile(meta.mechanism)
        released = lc_released(meta.mechanism)
        if released is not None:
            ctx.profiles.warm(released)  # what LC plans compose for this model
    except Exception:
        log.exception("profile job for model %s not started; it will be on first use", model_id)
        profile = None
    with session_scope(ctx.session_factory) as session:
        if profile is not None and meta.claimed is not None:
            # cached already (or computed just now): check this model's claim here
            apply_claim_checks(session=session, mech_hash=profile.mechanism_hash, profile=profile)
        row = repository.get_model(session=session, model_id=model_id)
        return labelled(session, row, to_public(row))


@router.post(
    "",
    operation_id="models_register",
    status_code=201,
    response_model=ModelPublic,
    openapi_extra=UPLOAD_BODY,
    responses={
        404: {"model": Problem},
        409: {"model": Problem},
        413: {"model": Problem},
        415: {"model": Problem},
        422: {"model": Problem},
    },
)
async def create_model(
    request: Request,
    ctx: ContextDep,
    who: Annotated[Principal, require("publish")],
    exist_ok: ExistOk = False,
) -> ModelPublic | JSONResponse:
    """Register a checkpoint: multipart ``weights`` (safetensors) and ``metadata`` (JSON),
    or ``metadata`` alone naming the checkpoint by ``weights_uri`` (s3:// or file://), or
    a bundle by ``files`` parts or, uploaded beforehand, by ``metadata.files``.
    ``metadata.dataset_id`` is the dataset's id or name; ``exist_ok``: the same model
    registered already under this name and version is answered (200).

    Nothing is stored unless the metadata is valid, the dataset exists, the
    name and version are free and the file is a complete safetensors file.
    """
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidInput("send multipart/form-data with parts 'weights' and 'metadata'")
    try:
        async with aclosing(request.stream()) as stream:
            form = await staged_form(
                request.headers,
                stream,
                staging_dir=ctx.blobs.staging_dir,  # not the system temp folder
                max_files=MAX_FILES + 1,
                max_fields=2,
                max_part_size=ctx.settings.max_metadata_bytes,
            )
    except (MultiPartException, StarletteHTTPException) as exc:
        # Starlette re-raises multipart errors as HTTPException(400)
        message = getattr(exc, "message", None) or str(getattr(exc, "detail", exc))
        if "maximum size" in message:
            raise PayloadTooLarge(f"metadata part too large: {message}") from exc
        raise InvalidInput(f"malformed multipart body: {message}") from exc
    except OSError as exc:  # the staging folder is the blob store's disk: full, or gone
        raise StorageError(
            f"could not stage the upload in the blob store: {exc.strerror or exc}"
        ) from exc
    try:
        raw = form.get("metadata")
        weights = form.get("weights")
        if raw is None:
            raise InvalidInput("the 'metadata' part is missing")
        if isinstance(raw, UploadFile):
            limit = ctx.settings.max_metadata_bytes
            text = await raw.read(limit + 1)
            if len(text) > limit:
                raise PayloadTooLarge(f"metadata is larger than {limit} bytes")
            meta = parse_metadata(text)
        else:
            meta = parse_metadata(raw)
        parts = form.getlist("files")
        if meta.files is not None:
            if weights is not None or parts or meta.weights_uri is not None:
                raise InvalidInput(
                    "metadata.files names uploads: send no file parts or weights_uri"
                )
            owner = owner_of(who.key_id)
            return await run_in_threadpool(_register, ctx, meta, None, None, owner, exist_ok)
        if meta.weights_uri is not None:
            if weights is not None or parts:
                raise InvalidInput(
                    "send either metadata.weights_uri or the file parts ('weights' or "
                    "'files'), not both"
                )
            return await run_in_threadpool(_register, ctx, meta, None, None, None, exist_ok)
        if parts:
            if weights is not None:
                raise InvalidInput("send either one 'weights' part or 'files' parts, not both")
            files: list[tuple[str, IO[bytes]]] = [
                (str(p.filename), p.file) for p in parts if isinstance(p, UploadFile) and p.filename
            ]
            if len(files) != len(parts):
                raise InvalidInput("each 'files' part must be a file named by its bundle path")
            return await run_in_threadpool(_register, ctx, meta, None, files, None, exist_ok)
        if not isinstance(weights, UploadFile):
            raise InvalidInput("the 'weights' part must be a file (a safetensors checkpoint)")
        check_complete_shards([weights.filename or ""])  # one shard is not a model
        return await run_in_threadpool(_register, ctx, meta, weights.file, None, None, exist_ok)
    finally:
        await form.close()
