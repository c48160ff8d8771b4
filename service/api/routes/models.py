from __future__ import annotations

import logging
import math
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.formparsers import MultiPartParser

from service.accounting.conversions import round_up
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import ACCOUNTANTS
from service.api.blob_responses import (
    CHARGED_DOWNLOAD_RESPONSES,
    blob_response,
    not_modified,
)
from service.api.context import Principal
from service.api.deps import (
    ContextDep,
    Limit,
    Offset,
    SessionDep,
    require,
)
from service.api.naming import labelled, with_labels
from service.api.routes.jobs import job_or_queued, pending_response
from service.api.routes.model_views import to_public
from service.api.schemas import (
    EpsilonPublic,
    ModelPublic,
    ModelsPublic,
    PendingPublic,
    Problem,
)
from service.errors import (
    InvalidInput,
    ProfilesPending,
    StorageError,
    Unsupported,
)
from service.ledger.charges import expose
from service.profiles.source import profiles_or_pending
from service.registry import names, repository
from service.registry.db import session_scope
from service.registry.keys import DOWNLOAD_SCOPE

log = logging.getLogger(__name__)

#: An uploaded file part stays in memory up to this, then spills to a temporary file
#: (Starlette's default is 1 MiB a part: a 1,024-file bundle could hold 1 GiB in memory).
UPLOAD_SPOOL_BYTES = 64 * 1024
MultiPartParser.spool_max_size = UPLOAD_SPOOL_BYTES

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get("", response_model=ModelsPublic, operation_id="models_list")
def list_models(
    session: SessionDep,
    who: Annotated[Principal, require("read")],
    dataset_id: Annotated[str | None, Query(max_length=200, description="its id or name")] = None,
    offset: Offset = 0,
    limit: Limit = 50,
) -> ModelsPublic:
    """The models; a metric's value is shown when it is declared 'prior', or to admin keys."""
    ds = names.dataset_id(session=session, ref=dataset_id) if dataset_id else None
    rows, total = repository.list_models(session=session, dataset_id=ds, offset=offset, limit=limit)
    admin = who.can("admin")
    data = with_labels(session, rows, [to_public(m, show_all=admin) for m in rows])
    return ModelsPublic(data=data, count=total, offset=offset, limit=limit)


@router.get(
    "/{model_id}",
    operation_id="models_get",
    response_model=ModelPublic,
    responses={404: {"model": Problem}},
)
def get_model(
    model_id: str, session: SessionDep, who: Annotated[Principal, require("read")]
) -> ModelPublic:
    """A model by id (by name: ``/v1/datasets/{dataset}/models/{NAME@VERSION}``); a
    metric's value is shown when it is declared 'prior', or to admin keys."""
    row = repository.get_model(session=session, model_id=model_id)
    return labelled(session, row, to_public(row, show_all=who.can("admin")))


@router.get(
    "/{model_id}/weights",
    operation_id="models_download",
    response_class=Response,
    responses=CHARGED_DOWNLOAD_RESPONSES,
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
        mechanism = parse_mechanism(model.mechanism)
    except ValueError as exc:  # a record stored under older, looser rules
        raise InvalidInput(f"the model's stored mechanism is invalid: {exc}") from exc
    try:
        (profile,) = profiles_or_pending(ctx.profiles, [("this model", mechanism)])
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
