from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse

from service.accounting.conversions import round_up
from service.accounting.planning import Plan
from service.api.blob_responses import WEIGHTS_RESPONSES, blob_response
from service.api.deps import BlobsDep, ContextDep, Limit, Offset, SessionDep, require
from service.api.routes.jobs import job_or_queued, pending_response
from service.api.routes.plans import spec_from, to_public
from service.api.routes.release_jobs import Deferred, pending_release, submit
from service.api.schemas import (
    CumulativePublic,
    ExposurePublic,
    LedgerPublic,
    PendingPublic,
    PlanWeight,
    Problem,
    ReleasePublic,
    ReleasesPublic,
    RetargetRequest,
)
from service.errors import ProfilesPending, Unsupported
from service.ledger import charges as ledger
from service.registry import names, repository
from service.registry.db import session_scope
from service.registry.exposures import list_exposures
from service.registry.models import Release
from service.releases import retarget as release_service
from service.releases.pending import ready

router = APIRouter(tags=["releases"])


def release_public(release: Release) -> ReleasePublic:
    plan = Plan(**release.plan)
    return ReleasePublic(
        release_id=release.id,
        dataset_id=release.dataset_id,
        method=release.method,
        accountant=release.accountant,
        epsilon=min(round_up(release.epsilon), float(release.request["epsilon"])),
        delta=release.delta,
        bound=release.bound,
        weights=[
            PlanWeight(model_id=m, model_name=plan.names.get(m), weight=w)
            for m, w in sorted(release.weights.items(), key=lambda kv: -kv[1])
        ],
        exposed_model_ids=list(release.exposed_model_ids),
        sha256=release.sha256,
        size_bytes=release.size_bytes,
        download_url=f"/v1/releases/{release.id}/weights",
        kind=release.kind,
        status=release.status,
        files_url=f"/v1/releases/{release.id}/files",
        archive_url=f"/v1/releases/{release.id}/archive",
        deployment=release.deployment,
        created_at=release.created_at,
        plan=to_public(plan, float(release.request["epsilon"])),
    )


@router.post(
    "/v1/retarget",
    operation_id="releases_create",
    dependencies=[require("release")],
    response_model=ReleasePublic,
    status_code=201,
    responses={
        200: {"model": ReleasePublic, "description": "this request was already served"},
        202: {
            "model": PendingPublic,
            "description": "profiles are being computed, or a large release is being merged",
        },
        404: {"model": Problem},
        409: {"model": Problem, "description": "the release would break the dataset's cap"},
        422: {"model": Problem},
        503: {"model": Problem},
    },
)
async def retarget(body: RetargetRequest, request: Request, ctx: ContextDep) -> Response:
    """Plan and release a model for the target; costs privacy and is recorded in the ledger.

    The same request (what can change the plan: dataset, target, method, accountant,
    objective and the fields it reads, candidates, dtype) returns the same release
    (200); random selection uses the dataset's one secret uniform, so a
    near-identical request selects the same model rather than drawing again. With
    ``Accept: application/octet-stream`` the merged safetensors file is streamed
    instead of the JSON.
    """
    spec = spec_from(body)
    deferred: Deferred = []
    defer = (ctx.settings.release_async_bytes, lambda rid, fn: deferred.append((rid, fn)))

    def run() -> tuple[ReleasePublic | None, bool, JSONResponse | None]:
        try:
            with session_scope(ctx.session_factory) as session:
                # by id from here on: the dataset's lock and the request's hash take ids
                dataset_id = names.dataset_id(session=session, ref=body.dataset_id)
                release, created = release_service.retarget(
                    session=session,
                    profiles=ctx.profiles,
                    blobs=ctx.blobs,
                    dataset_id=dataset_id,
                    model_ids=names.model_ids(
                        session=session, dataset_id=dataset_id, refs=body.model_ids
                    ),
                    spec=spec,
                    deployment=body.deployment,
                    dtype=body.dtype,
                    max_shard_size=body.max_shard_size,
                    defer=defer,
                    compute=ctx.plan_jobs.compute,
                )
                public = release_public(release)
        except ProfilesPending as exc:
            return None, False, pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
        return public, created, None

    public, created, pending = await run_in_threadpool(run)
    if pending is not None:
        return pending
    assert public is not None
    if deferred:  # committed: the budget is reserved, the merge starts now
        return submit(ctx, public, deferred)
    if public.status == "pending":
        return pending_release(public)
    if "application/octet-stream" in request.headers.get("accept", "") and public.kind != (
        "safetensors"
    ):
        return RedirectResponse(public.archive_url, status_code=303)
    if "application/octet-stream" in request.headers.get("accept", ""):
        response = blob_response(
            request, ctx.blobs, public.sha256, f"{public.release_id}.safetensors"
        )
        response.headers["X-Release-Id"] = public.release_id
        return response
    return JSONResponse(
        public.model_dump(mode="json"),
        status_code=201 if created else 200,
        headers={"Location": f"/v1/releases/{public.release_id}"},
    )


@router.get(
    "/v1/releases",
    operation_id="releases_list",
    dependencies=[require("read")],
    response_model=ReleasesPublic,
)
def list_releases(
    session: SessionDep,
    dataset_id: Annotated[str | None, Query(max_length=36)] = None,
    offset: Offset = 0,
    limit: Limit = 50,
) -> ReleasesPublic:
    """Releases, newest first; ``dataset_id`` keeps one dataset's."""
    if dataset_id is not None:  # an id or a name, as everywhere
        dataset_id = names.dataset_id(session=session, ref=dataset_id)
    rows, total = repository.page_releases(
        session=session, dataset_id=dataset_id, offset=offset, limit=limit
    )
    return ReleasesPublic(
        data=[release_public(r) for r in rows], count=total, offset=offset, limit=limit
    )


@router.get(
    "/v1/releases/{release_id}",
    operation_id="releases_get",
    dependencies=[require("read")],
    response_model=ReleasePublic,
    responses={404: {"model": Problem}},
)
def get_release(release_id: str, session: SessionDep) -> ReleasePublic:
    return release_public(repository.get_release(session=session, release_id=release_id))


@router.get(
    "/v1/releases/{release_id}/weights",
    operation_id="releases_download",
    dependencies=[require("read")],
    response_class=Response,
    responses={**WEIGHTS_RESPONSES, 404: {"model": Problem}},
)
def get_release_weights(
    release_id: str, request: Request, session: SessionDep, blobs: BlobsDep
) -> Response:
    """The released weights, with ETag = sha256, If-None-Match (304) and Range."""
    release = repository.get_release(session=session, release_id=release_id)
    ready(release)
    if release.files is not None:
        raise Unsupported(
            f"release {release_id!r} is a {release.kind} bundle: get /v1/releases/"
            f"{release_id}/archive or its /files"
        )
    return blob_response(request, blobs, release.sha256, f"{release.id}.safetensors")


@router.get(
    "/v1/datasets/{dataset_id}/ledger",
    operation_id="releases_ledger",
    dependencies=[require("read")],
    response_model=LedgerPublic,
    responses={202: {"model": PendingPublic}, 404: {"model": Problem}},
)
def get_ledger(dataset_id: str, ctx: ContextDep) -> LedgerPublic | JSONResponse:
    """What the outside world has seen of the dataset, bounded by the joint release of
    every model the releases, raw downloads and scored plans exposed (Theorem 6.1),
    against the dataset's cap."""
    try:
        with session_scope(ctx.session_factory) as session:
            dataset = names.dataset_by_ref(session=session, ref=dataset_id)
            dataset_id = dataset.id
            rows = repository.list_releases(session=session, dataset_id=dataset_id)
            exposures = list_exposures(session=session, dataset_id=dataset_id)
            bound = ledger.ledger_bound(
                session=session,
                profiles=ctx.profiles,
                dataset=dataset,
                releases=ledger.ledger_entries(session, dataset_id),
            )
            return LedgerPublic(
                dataset_id=dataset.id,
                releases=[release_public(r) for r in rows],
                exposures=[
                    ExposurePublic.model_validate(e, from_attributes=True) for e in exposures
                ],
                exposed_model_ids=bound.exposed_model_ids,
                cumulative=CumulativePublic(
                    epsilon=round_up(bound.epsilon),
                    delta=bound.delta,
                    accountant=bound.accountant,
                    heuristic=bound.heuristic,
                ),
                epsilon_cap=dataset.epsilon_cap,
                delta_cap=ledger.ledger_delta(dataset) if dataset.epsilon_cap is not None else None,
            )
    except ProfilesPending as exc:
        return pending_response([job_or_queued(ctx.jobs, j) for j in exc.job_ids])
