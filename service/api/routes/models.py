from __future__ import annotations

import json
import logging
import math
from typing import IO, Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException, MultiPartParser

from service.accounting.conversions import round_up
from service.accounting.cost import refusal
from service.accounting.mechanisms import error_messages, parse_mechanism
from service.accounting.profiles.profile import ACCOUNTANTS
from service.api.blob_responses import WEIGHTS_RESPONSES, blob_response, not_modified
from service.api.context import Principal
from service.api.deps import (
    AppContext,
    ContextDep,
    Limit,
    Offset,
    SessionDep,
    require,
)
from service.api.naming import ExistOk, dataset_id_of, existing_model, labelled, with_labels
from service.api.routes.jobs import job_or_queued, pending_response
from service.api.routes.model_uploads import UPLOAD_BODY
from service.api.routes.plans import RECENT as RECENT_PLANS
from service.api.schemas import (
    BundleFile,
    Claimed,
    EpsilonPublic,
    Lineage,
    ModelCreate,
    ModelPublic,
    ModelsPublic,
    PendingPublic,
    Problem,
)
from service.errors import (
    InvalidInput,
    PayloadTooLarge,
    ProfilesPending,
    ProfileTooCostly,
    StorageError,
    Unsupported,
)
from service.formats.bundles import MAX_FILES
from service.formats.streams import iter_file
from service.ledger.charges import expose
from service.plans.planner import lc_released
from service.profiles.cache import cost_limits
from service.profiles.claims import apply_claim_checks
from service.profiles.source import profiles_or_pending
from service.registry import names, repository
from service.registry.bundles import register_bundle
from service.registry.db import session_scope
from service.registry.keys import DOWNLOAD_SCOPE
from service.registry.models import Model
from service.registry.references import open_reference

log = logging.getLogger(__name__)

#: An uploaded file part stays in memory up to this, then spills to a temporary file
#: (Starlette's default is 1 MiB a part: a 1,024-file bundle could hold 1 GiB in memory).
UPLOAD_SPOOL_BYTES = 64 * 1024
MultiPartParser.spool_max_size = UPLOAD_SPOOL_BYTES

router = APIRouter(prefix="/v1/models", tags=["models"])


def to_public(model: Model) -> ModelPublic:
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
        metrics=model.metrics,
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
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_metadata(raw: str | bytes) -> ModelCreate:
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"metadata is not valid JSON: {exc}") from exc
    try:
        return ModelCreate.model_validate(data)
    except ValidationError as exc:
        errs = error_messages(exc, prefix="metadata")
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errs[:5])
        raise InvalidInput(f"invalid metadata: {detail}", errors=errs) from exc


def _register(
    ctx: AppContext,
    meta: ModelCreate,
    weights: IO[bytes] | None,
    files: list[tuple[str, IO[bytes]]] | None = None,
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
            register_bundle(
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
    dependencies=[require("publish")],
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
    request: Request, ctx: ContextDep, exist_ok: ExistOk = False
) -> ModelPublic | JSONResponse:
    """Register a checkpoint: multipart ``weights`` (safetensors) and ``metadata`` (JSON),
    or ``metadata`` alone naming the checkpoint by ``weights_uri`` (s3:// or file://).
    ``metadata.dataset_id`` is the dataset's id or name.

    Nothing is stored unless the metadata is valid, the dataset exists, the
    name and version are free and the file is a complete safetensors file.
    """
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidInput("send multipart/form-data with parts 'weights' and 'metadata'")
    try:
        form = await request.form(
            max_files=MAX_FILES + 1, max_fields=2, max_part_size=ctx.settings.max_metadata_bytes
        )
    except (MultiPartException, StarletteHTTPException) as exc:
        # Starlette re-raises multipart errors as HTTPException(400)
        message = getattr(exc, "message", None) or str(getattr(exc, "detail", exc))
        if "maximum size" in message:
            raise PayloadTooLarge(f"metadata part too large: {message}") from exc
        raise InvalidInput(f"malformed multipart body: {message}") from exc
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
        if meta.weights_uri is not None:
            if weights is not None or parts:
                raise InvalidInput(
                    "send either metadata.weights_uri or the file parts ('weights' or "
                    "'files'), not both"
                )
            return await run_in_threadpool(_register, ctx, meta, None, None, exist_ok)
        if parts:
            if weights is not None:
                raise InvalidInput("send either one 'weights' part or 'files' parts, not both")
            files: list[tuple[str, IO[bytes]]] = [
                (str(p.filename), p.file) for p in parts if isinstance(p, UploadFile) and p.filename
            ]
            if len(files) != len(parts):
                raise InvalidInput("each 'files' part must be a file named by its bundle path")
            return await run_in_threadpool(_register, ctx, meta, None, files, exist_ok)
        if not isinstance(weights, UploadFile):
            raise InvalidInput("the 'weights' part must be a file (a safetensors checkpoint)")
        return await run_in_threadpool(_register, ctx, meta, weights.file, None, exist_ok)
    finally:
        await form.close()


@router.get(
    "", dependencies=[require("read")], response_model=ModelsPublic, operation_id="models_list"
)
def list_models(
    session: SessionDep,
    dataset_id: Annotated[str | None, Query(max_length=200, description="its id or name")] = None,
    offset: Offset = 0,
    limit: Limit = 50,
) -> ModelsPublic:
    ds = names.dataset_id(session=session, ref=dataset_id) if dataset_id else None
    rows, total = repository.list_models(session=session, dataset_id=ds, offset=offset, limit=limit)
    data = with_labels(session, rows, [to_public(m) for m in rows])
    return ModelsPublic(data=data, count=total, offset=offset, limit=limit)


@router.get(
    "/{model_id}",
    operation_id="models_get",
    dependencies=[require("read")],
    response_model=ModelPublic,
    responses={404: {"model": Problem}},
)
def get_model(model_id: str, session: SessionDep) -> ModelPublic:
    """A model by id (by name: ``/v1/datasets/{dataset}/models/{NAME@VERSION}``)."""
    row = repository.get_model(session=session, model_id=model_id)
    return labelled(session, row, to_public(row))


@router.get(
    "/{model_id}/weights",
    operation_id="models_download",
    response_class=Response,
    responses={
        **WEIGHTS_RESPONSES,
        202: {"model": PendingPublic, "description": "the model's profile is being computed"},
        404: {"model": Problem},
        409: {"model": Problem, "description": "the download would break the dataset's cap"},
    },
)
def get_model_weights(
    model_id: str,
    request: Request,
    ctx: ContextDep,
    who: Annotated[Principal, require(DOWNLOAD_SCOPE)],
) -> Response:
    """The registered model's raw weights: a private input, exposed exactly as an RS
    release of this model alone would expose it. Scope ``models:download``; every
    download (not a 304) is recorded in the dataset's ledger as an exposure of this
    model, and refused with 409 when the ledger's bound would then break the cap."""
    try:
        with session_scope(ctx.session_factory) as session:
            model = repository.get_model(session=session, model_id=model_id)
            sha, dataset_id = model.sha256, model.dataset_id
            if model.files is not None:
                raise Unsupported(f"model {model_id!r} is a {model.kind} bundle, not one file")
            filename = f"{model.name}-v{model.version}.safetensors"
            if not not_modified(request, sha):
                if not ctx.blobs.exists(sha):
                    raise StorageError(f"blob {sha} is missing from the store")
                expose(
                    session=session,
                    profiles=ctx.profiles,
                    dataset_id=dataset_id,
                    kind="download",
                    model_ids=[model_id],
                    key_id=who.key_id,
                    key_name=who.name,
                )
    except ProfilesPending as exc:
        return pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
    return blob_response(request, ctx.blobs, sha, filename)


DeltaQuery = Annotated[float, Query(gt=0, lt=1, allow_inf_nan=False)]
AccountantQuery = Annotated[Literal["rdp", "pld", "best"], Query()]


@router.get(
    "/{model_id}/epsilon",
    operation_id="models_epsilon",
    dependencies=[require("read")],
    response_model=EpsilonPublic,
    responses={
        202: {"model": PendingPublic, "description": "the profile is being computed"},
        404: {"model": Problem},
        422: {"model": Problem},
        500: {"model": Problem},
        503: {"model": Problem},
    },
)
def get_model_epsilon(
    model_id: str,
    session: SessionDep,
    ctx: ContextDep,
    delta: DeltaQuery = 1e-5,
    accountant: AccountantQuery = "best",
) -> EpsilonPublic | JSONResponse:
    """The model's privacy guarantee at ``delta``: an upper bound, rounded up.

    From the profile cache; on a miss the profile job is queued (once per mechanism)
    and the answer is 202 with ``Retry-After`` and the job (embedded default: computed
    in the request instead).
    """
    model = repository.get_model(session=session, model_id=model_id)
    try:
        (profile,) = profiles_or_pending(
            ctx.profiles, [("this model", parse_mechanism(model.mechanism))]
        )
    except ProfilesPending as exc:
        return pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
    eps = profile.epsilon(delta, accountant)
    # The PLD accountant falls back to the RDP-derived curve where no PLD is known.
    used = "pld" if profile.pld is not None and eps == profile.epsilon(delta, "pld") else "rdp"
    if not math.isfinite(eps):
        reason = (
            "the model has no privacy guarantee"
            if profile.non_private
            else (
                f"the {accountant} accountant proves no finite epsilon at delta={delta} for a "
                f"{profile.mechanism_type} mechanism"
            )
        )
        raise Unsupported(reason, accountants=list(ACCOUNTANTS))
    return EpsilonPublic(
        epsilon=round_up(eps),
        delta=delta,
        accountant=accountant,
        used=used,
        heuristic=profile.heuristic,
        notes=list(profile.notes),
    )
