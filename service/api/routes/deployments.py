from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from service.api.blob_responses import WEIGHTS_RESPONSES, blob_response
from service.api.deps import BlobsDep, ContextDep, Limit, Offset, SessionDep, require
from service.api.naming import ExistOk
from service.api.schemas import (
    DeploymentCreate,
    DeploymentEventPublic,
    DeploymentPublic,
    DeploymentsPublic,
    PolicyUpdate,
    Problem,
)
from service.deployments import follow
from service.deployments import policies as service
from service.deployments.callbacks import AllowList, redact_url
from service.deployments.runner import dispatch
from service.errors import NotFound, Unsupported
from service.registry import names, repository
from service.registry.db import session_scope
from service.registry.models import Deployment

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])


def deployment_public(session: Session, dep: Deployment) -> DeploymentPublic:
    return DeploymentPublic(
        name=dep.name,
        dataset_id=dep.dataset_id,
        epsilon=dep.epsilon,
        delta=dep.delta,
        method=dep.method,
        accountant=dep.accountant,
        callback_url=redact_url(dep.callback_url),
        policy_version=dep.policy_version,
        follows=follow.follows_text(session, dep),
        current_release_id=dep.current_release_id,
        model_url=f"/v1/deployments/{dep.name}/model",
        archive_url=f"/v1/deployments/{dep.name}/archive",
        last_error=dep.last_error,
        created_at=dep.created_at,
        updated_at=dep.updated_at,
        history=[
            DeploymentEventPublic(
                kind=e.kind,
                epsilon=e.epsilon,
                delta=e.delta,
                release_id=e.release_id,
                reason=e.reason,
                source=e.source,
                created_at=e.created_at,
            )
            for e in service.events(session=session, deployment_id=dep.id)
        ],
    )


@router.post(
    "",
    operation_id="deployments_create",
    dependencies=[require("release")],
    status_code=201,
    response_model=DeploymentPublic,
    responses={
        200: {"model": DeploymentPublic, "description": "exist_ok: the deployment, already there"},
        404: {"model": Problem},
        409: {"model": Problem},
        422: {"model": Problem},
    },
)
async def create_deployment(
    body: DeploymentCreate, ctx: ContextDep, exist_ok: ExistOk = False
) -> DeploymentPublic | JSONResponse:
    """Bind a name to a dataset and a policy, and release its first model.

    ``dataset_id`` is the dataset's id or name. With ``follows`` (``NAME@ALIAS``) the
    deployment serves the version the alias names, alone: each of its releases is a
    release of that one model, charged as one, refused when the model's own epsilon is
    over the policy; moving the alias re-targets it. ``exist_ok``: a deployment of this
    name with the same dataset, method, accountant, callback and alias is answered as
    it is (200, its current policy: policy changes move that); 409 when they differ.

    Nothing is stored when the first release cannot be made (422 with the reason,
    409 over the dataset's cap). A ``callback_url`` whose host is an internal address
    (loopback, private, link-local, ...: any notation) or ``localhost`` is refused (422)
    unless ``RETARGET_CALLBACK_ALLOW`` admits it; it is stored whole but shown only as
    ``scheme://host[:port]/…``.
    """

    def run() -> DeploymentPublic | JSONResponse:
        with session_scope(ctx.session_factory) as session:
            ref = body.dataset_id or names.parse_model_ref(str(body.follows)).dataset
            dataset = names.dataset_by_ref(session=session, ref=str(ref))
            follows = (
                follow.parse_follows(session=session, dataset=dataset, follows=body.follows)
                if body.follows is not None
                else None
            )
            dep, release, announce = service.create_deployment(
                session=session,
                profiles=ctx.profiles,
                blobs=ctx.blobs,
                name=body.name,
                dataset_id=dataset.id,
                epsilon=body.epsilon,
                delta=body.delta,
                method=body.method,
                accountant=body.accountant,
                callback_url=body.callback_url,
                callback_secret=ctx.settings.callback_secret,
                callback_allow=AllowList.parse(ctx.settings.callback_allow),
                version=int(time.time()),
                compute=ctx.plan_jobs.compute,
                follows=follows,
                exist_ok=exist_ok,
            )
            public = deployment_public(session, dep)
        if release is None:  # exist_ok: it was there already
            return JSONResponse(public.model_dump(mode="json"), status_code=200)
        dispatch(ctx, announce)
        return public

    return await run_in_threadpool(run)


@router.get(
    "",
    dependencies=[require("read")],
    response_model=DeploymentsPublic,
    operation_id="deployments_list",
)
def list_deployments(
    session: SessionDep, offset: Offset = 0, limit: Limit = 50
) -> DeploymentsPublic:
    rows = service.list_deployments(session=session, offset=offset, limit=limit)
    return DeploymentsPublic(
        data=[deployment_public(session, d) for d in rows],
        count=service.count_deployments(session=session),
        offset=offset,
        limit=limit,
    )


@router.get(
    "/{name}",
    operation_id="deployments_get",
    dependencies=[require("read")],
    response_model=DeploymentPublic,
    responses={404: {"model": Problem}},
)
def get_deployment(name: str, session: SessionDep) -> DeploymentPublic:
    return deployment_public(session, service.get_deployment(session=session, name=name))


@router.put(
    "/{name}/policy",
    operation_id="deployments_set_policy",
    dependencies=[require("release")],
    response_model=DeploymentPublic,
    responses={404: {"model": Problem}, 409: {"model": Problem}, 422: {"model": Problem}},
)
async def change_policy(name: str, body: PolicyUpdate, ctx: ContextDep) -> DeploymentPublic:
    """Re-target: plan, release, point the deployment at the new release.

    A policy that cannot be met is refused with the reason (422; 409 over the cap);
    the deployment keeps serving its previous model and the failure is in its history.
    """

    def run() -> DeploymentPublic:
        change = service.change_policy(
            session_factory=ctx.session_factory,
            profiles=ctx.profiles,
            blobs=ctx.blobs,
            name=name,
            epsilon=body.epsilon,
            delta=body.delta,
            reason=body.reason,
            source="api",
            # an operator's change is the newest policy: it moves the version to now
            version=int(time.time()),
            refuse_older=False,
            notify=bool(ctx.settings.callback_secret),
            compute=ctx.plan_jobs.compute,
        )
        with session_scope(ctx.session_factory) as session:
            dep = service.get_deployment(session=session, name=name)
            public = deployment_public(session, dep)
        dispatch(ctx, change.notify_item)
        return public

    return await run_in_threadpool(run)


@router.get(
    "/{name}/model",
    operation_id="deployments_pull",
    dependencies=[require("read")],
    response_class=Response,
    responses={**WEIGHTS_RESPONSES, 404: {"model": Problem}},
)
def get_deployment_model(
    name: str, request: Request, session: SessionDep, blobs: BlobsDep
) -> Response:
    """The deployment's current weights: ETag = sha256, so serving infra polls with
    If-None-Match and gets 304 until the model changes."""
    dep = service.get_deployment(session=session, name=name)
    if dep.current_release_id is None:
        raise NotFound(f"deployment {name!r} has no release yet")
    release = repository.get_release(session=session, release_id=dep.current_release_id)
    if release.files is not None:
        raise Unsupported(
            f"deployment {name!r} serves a {release.kind} bundle: get /v1/deployments/"
            f"{name}/archive or its /files"
        )
    return blob_response(request, blobs, release.sha256, f"{dep.name}.safetensors")
