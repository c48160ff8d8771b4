"""Dashboard pages of releases, the ledger and deployments with their webhook deliveries."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select

from service.accounting.conversions import round_up
from service.api.blob_responses import blob_response
from service.api.deps import AppContext, ContextDep
from service.dashboard.common import (
    Viewer,
    page,
)
from service.deployments import outbox
from service.deployments import policies as deployment_service
from service.errors import ProfilesPending, Unsupported
from service.ledger import charges as ledger
from service.registry import repository
from service.registry.db import session_scope
from service.registry.exposures import list_exposures
from service.registry.models import Dataset, Deployment, Model, WebhookDelivery
from service.releases.pending import ready

router = APIRouter(prefix="/admin", include_in_schema=False)


# ---- releases and ledger -----------------------------------------------------------------


@router.get("/datasets/{dataset_id}/releases", response_class=HTMLResponse)
def releases_page(request: Request, dataset_id: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        releases = repository.list_releases(session=session, dataset_id=dataset_id)
        exposures = list_exposures(session=session, dataset_id=dataset_id)
        names = {
            m.id: m.name
            for m in session.scalars(select(Model).where(Model.dataset_id == dataset_id))
        }
        # releases and exposures (raw downloads, scored plans) in the order they happened
        events: list[tuple[Any, str, Any, ledger.Entry]] = [
            *(
                (r.created_at, "release", r, (list(r.exposed_model_ids), r.epsilon, r.delta))
                for r in releases
            ),
            *((e.first_at, "exposure", e, ledger.exposure_entry(e)) for e in exposures),
        ]
        events.sort(key=lambda ev: ev[0])
        running: list[dict[str, Any]] = []
        bound = None
        try:
            for i, (_, kind, item, _) in enumerate(events):
                b = ledger.ledger_bound(
                    session=session,
                    profiles=ctx.profiles,
                    dataset=dataset,
                    releases=[ev[3] for ev in events[: i + 1]],
                )
                running.append({"kind": kind, "r": item, "cumulative": round_up(b.epsilon)})
                bound = b
        except ProfilesPending:
            running = [{"kind": kind, "r": item, "cumulative": None} for _, kind, item, _ in events]
        return page(
            request,
            "releases.html",
            who,
            dataset=dataset,
            rows=running,
            bound=bound,
            names=names,
            cap=dataset.epsilon_cap,
        )


@router.get("/releases/{release_id}/weights")
def release_weights(release_id: str, request: Request, ctx: ContextDep, who: Viewer) -> Response:
    with session_scope(ctx.session_factory) as session:
        release = repository.get_release(session=session, release_id=release_id)
        ready(release)
        if release.files is not None:
            raise Unsupported(
                f"release {release_id!r} is a {release.kind} bundle: download "
                f"/v1/releases/{release_id}/archive with an API key"
            )
        sha = release.sha256
    return blob_response(request, ctx.blobs, sha, f"release-{release_id}.safetensors")


# ---- deployments ----------------------------------------------------------------------


@router.get("/deployments", response_class=HTMLResponse)
def deployments_page(request: Request, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        deployments = deployment_service.list_deployments(session=session)
        datasets = {d.id: d.name for d in session.scalars(select(Dataset))}
        deliveries = [
            _delivery(ctx, d)
            for d in session.scalars(
                select(WebhookDelivery).order_by(WebhookDelivery.received_at.desc()).limit(50)
            )
        ]
        return page(
            request,
            "deployments.html",
            who,
            deployments=deployments,
            datasets=datasets,
            deliveries=deliveries,
        )


@router.get("/deployments/{name}", response_class=HTMLResponse)
def deployment_page(request: Request, name: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        dep: Deployment = deployment_service.get_deployment(session=session, name=name)
        events = deployment_service.events(session=session, deployment_id=dep.id)
        release = (
            repository.get_release(session=session, release_id=dep.current_release_id)
            if dep.current_release_id
            else None
        )
        deliveries = [
            _delivery(ctx, d)
            for d in session.scalars(
                select(WebhookDelivery).order_by(WebhookDelivery.received_at.desc()).limit(200)
            )
            if (d.response or {}).get("deployment") == name
        ]
        return page(
            request,
            "deployment.html",
            who,
            dep=dep,
            events=events,
            release=release,
            deliveries=deliveries,
        )


def _delivery(ctx: AppContext, d: WebhookDelivery) -> dict[str, Any]:
    """A webhook delivery with the outcome of the job it started."""
    job_id = ((d.response or {}).get("job") or {}).get("id")
    outcome = None
    if job_id:
        try:
            info = outbox.find_job(ctx.session_factory, ctx.jobs, str(job_id))
            outcome = info.status + (f": {info.error}" if info.error else "")
            if info.status == "finished" and info.result and info.result.get("status"):
                outcome += f" ({info.result['status']})"
        except Exception:  # the job may have expired from the queue
            outcome = "unknown (job no longer kept)"
    return {
        "id": d.id,
        "source": d.source,
        "status_code": d.status_code,
        "deployment": (d.response or {}).get("deployment"),
        "received_at": d.received_at,
        "outcome": outcome,
    }
