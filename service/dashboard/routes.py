"""The admin dashboard at /admin: server-rendered pages over the registry, the ledger and
the deployments, and the plan explorer. Read-only; logging in takes an API key with the
admin or read scope. No page shows a secret: keys appear by name and prefix, callback
URLs without credentials or query, webhook secrets never."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.accounting.conversions import ORDERS, round_up
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles import PrivacyProfile
from service.api.blob_responses import blob_response
from service.api.deps import AppContext, ContextDep
from service.config import Settings
from service.dashboard.auth import COOKIE, SessionSigner, readable_key
from service.dashboard.frontier import Frontier, compute_frontier, explorer_plans
from service.dashboard.svg import Chart, Series, render
from service.errors import ProfilesPending
from service.jobs import deployments as deployment_service
from service.jobs import releases as release_service
from service.jobs.lru import Lru
from service.jobs.plans import candidate_rows, candidates_from
from service.jobs.queue import profiles_or_pending
from service.registry import repository
from service.registry.db import session_scope
from service.registry.keys import find_key
from service.registry.models import ApiKey, Dataset, Deployment, Model, Release, WebhookDelivery

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(prefix="/admin", include_in_schema=False)
DEFAULT_DELTA = 1e-5


class LoginRequired(Exception):
    pass


def signer(request: Request) -> SessionSigner:
    signer: SessionSigner = request.app.state.session_signer
    return signer


def viewer(request: Request, ctx: ContextDep) -> ApiKey:
    key_id = signer(request).key_id(request.cookies.get(COOKIE))
    if key_id is None:
        raise LoginRequired
    with session_scope(ctx.session_factory) as session:
        row = readable_key(session, key_id)
        if row is None:
            raise LoginRequired
        session.expunge(row)
        return row


Viewer = Annotated[ApiKey, Depends(viewer)]


def page(request: Request, name: str, viewer_key: ApiKey | None, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, name, {"viewer": viewer_key, "round_up": round_up, **context}
    )


def svg_response(chart: Chart) -> Response:
    return Response(render(chart), media_type="image/svg+xml")


def dataset_delta(dataset: Dataset) -> float:
    return dataset.delta_cap or DEFAULT_DELTA


def mechanism_summary(mech: dict[str, Any]) -> str:
    kind = mech.get("type", "?")
    if kind == "dp_sgd":
        segments = mech.get("schedule") or [mech]
        optimizer = mech.get("optimizer", "sgd")
        steps = sum(int(seg.get("steps") or 0) for seg in segments)
        first = segments[0]
        if len(segments) == 1 and first.get("noise_multiplier") is not None:
            return (
                f"DP-SGD q={first['sampling_rate']:.4g} sigma={first['noise_multiplier']:g} "
                f"C={first['clipping_norm']:g} T={steps} ({optimizer})"
            )
        return f"DP-SGD, {len(segments)} segments, T={steps} ({optimizer})"
    if kind == "gaussian":
        return f"Gaussian x{mech.get('count', 1)}"
    if kind == "epsilon_delta":
        return f"({mech.get('epsilon')}, {mech.get('delta')})-DP"
    return kind.replace("_", " ")


def safe_url(url: str | None) -> str | None:
    """A URL without user info, query or fragment (they may carry credentials)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# ---- login ------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, error: str | None = None) -> HTMLResponse:
    return page(request, "login.html", None, error=error)


@router.post("/login")
def login(request: Request, ctx: ContextDep, key: Annotated[str, Form()] = "") -> Response:
    with session_scope(ctx.session_factory) as session:
        row = find_key(session=session, key=key.strip()) if key.strip() else None
        ok = row is not None and readable_key(session, row.id) is not None
        key_id = row.id if row is not None else ""
    if not ok:
        return page(request, "login.html", None, error="unknown, revoked or not a read/admin key")
    response = RedirectResponse("/admin", status_code=303)
    response.set_cookie(
        COOKIE,
        signer(request).issue(key_id),
        max_age=ctx.settings.session_ttl_s,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/admin",
    )
    return response


@router.post("/logout")
def logout() -> Response:
    response = RedirectResponse("/admin/login", status_code=303)
    response.delete_cookie(COOKIE, path="/admin")
    return response


# ---- datasets and models ------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
def datasets_page(request: Request, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        counts = dict(
            session.execute(select(Model.dataset_id, func.count()).group_by(Model.dataset_id)).all()
        )
        releases = dict(
            session.execute(
                select(Release.dataset_id, func.count()).group_by(Release.dataset_id)
            ).all()
        )
        datasets = list(session.scalars(select(Dataset).order_by(Dataset.created_at)))
        rows = [
            {"d": d, "models": counts.get(d.id, 0), "releases": releases.get(d.id, 0)}
            for d in datasets
        ]
        return page(request, "datasets.html", who, rows=rows)


def _profiles(ctx: AppContext, models: list[Model]) -> list[Any] | None:
    try:
        return profiles_or_pending(
            ctx.jobs, [(f"model {m.id!r}", parse_mechanism(m.mechanism)) for m in models]
        )
    except ProfilesPending:
        return None


@router.get("/datasets/{dataset_id}", response_class=HTMLResponse)
def dataset_page(request: Request, dataset_id: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        models = list(
            session.scalars(
                select(Model).where(Model.dataset_id == dataset_id).order_by(Model.created_at)
            )
        )
        delta = dataset_delta(dataset)
        profiles = _profiles(ctx, models)
        rows = []
        for i, m in enumerate(models):
            eps = profiles[i].epsilon(delta, "best") if profiles is not None else None
            rows.append(
                {
                    "m": m,
                    "summary": mechanism_summary(m.mechanism),
                    "epsilon": round_up(eps) if eps is not None and math.isfinite(eps) else eps,
                }
            )
        return page(
            request,
            "dataset.html",
            who,
            dataset=dataset,
            rows=rows,
            delta=delta,
            pending=profiles is None,
        )


@router.get("/models/{model_id}", response_class=HTMLResponse)
def model_page(request: Request, model_id: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        model = repository.get_model(session=session, model_id=model_id)
        dataset = repository.get_dataset(session=session, dataset_id=model.dataset_id)
        profiles = _profiles(ctx, [model])
        table = []
        if profiles is not None:
            for delta in (1e-3, 1e-5, 1e-6, 1e-8, 1e-10):
                table.append(
                    {
                        "delta": delta,
                        "rdp": profiles[0].epsilon(delta, "rdp"),
                        "pld": profiles[0].epsilon(delta, "pld"),
                    }
                )
        return page(
            request,
            "model.html",
            who,
            model=model,
            dataset=dataset,
            summary=mechanism_summary(model.mechanism),
            table=table,
            pending=profiles is None,
        )


def _model_profile(ctx: AppContext, model_id: str) -> PrivacyProfile:
    with session_scope(ctx.session_factory) as session:
        model = repository.get_model(session=session, model_id=model_id)
        (profile,) = profiles_or_pending(ctx.jobs, [("model", parse_mechanism(model.mechanism))])
    return profile


@router.get("/models/{model_id}/profile.svg")
def model_profile_svg(model_id: str, ctx: ContextDep, who: Viewer) -> Response:
    profile = _model_profile(ctx, model_id)
    chart = Chart("epsilon vs delta", x_label="epsilon", y_label="delta", log_y=True)
    deltas = np.geomspace(1e-12, 1e-1, 45)
    for acc, color, dashed in (("rdp", "#1f77b4", True), ("pld", "#d62728", False)):
        pts = [(profile.epsilon(float(d), acc), float(d)) for d in deltas]  # type: ignore[arg-type]
        chart.series.append(Series(acc.upper(), pts, dashed=dashed, color=color))
    return svg_response(chart)


@router.get("/models/{model_id}/rdp.svg")
def model_rdp_svg(model_id: str, ctx: ContextDep, who: Viewer) -> Response:
    profile = _model_profile(ctx, model_id)
    orders = ORDERS[ORDERS <= 64]
    values = profile.rdp_at(orders)
    chart = Chart("RDP curve", x_label="order alpha", y_label="RDP epsilon(alpha)", log_y=True)
    chart.series.append(Series("RDP", list(zip(orders.tolist(), values.tolist(), strict=True))))
    return svg_response(chart)


@router.get("/models/{model_id}/weights")
def model_weights(model_id: str, request: Request, ctx: ContextDep, who: Viewer) -> Response:
    with session_scope(ctx.session_factory) as session:
        model = repository.get_model(session=session, model_id=model_id)
        sha, name = model.sha256, f"{model.name}-v{model.version}.safetensors"
    return blob_response(request, ctx.blobs, sha, name)


# ---- plan explorer ---------------------------------------------------------------------


def _candidates(session: Session, ctx: AppContext, dataset_id: str) -> tuple[list[Any], dict]:
    rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=None)
    return candidates_from(rows, ctx.jobs, for_lc=True), {m.id: m.name for m in rows}


@router.get("/datasets/{dataset_id}/explorer", response_class=HTMLResponse)
def explorer_page(request: Request, dataset_id: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        models = list(session.scalars(select(Model).where(Model.dataset_id == dataset_id)))
        delta = dataset_delta(dataset)
        profiles = _profiles(ctx, models)
        eps = sorted(
            e for e in (p.epsilon(delta, "best") for p in profiles or []) if math.isfinite(e)
        )
        lo = round_up(eps[0] * 0.5) if eps else 0.1
        hi = round_up(eps[-1] * 1.2) if eps else 10.0
        start = round_up(math.sqrt(eps[0] * eps[-1])) if eps else 1.0
        return page(
            request,
            "explorer.html",
            who,
            dataset=dataset,
            delta=delta,
            lo=lo,
            hi=hi,
            start=start,
            names={m.id: m.name for m in models},
            pending=profiles is None,
        )


@router.get("/datasets/{dataset_id}/plans.json")
async def explorer_json(
    dataset_id: str,
    ctx: ContextDep,
    who: Viewer,
    epsilon: Annotated[float, Query(gt=0, le=1e6, allow_inf_nan=False)],
) -> JSONResponse:
    def run() -> dict[str, Any]:
        with session_scope(ctx.session_factory) as session:
            dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
            candidates, names = _candidates(session, ctx, dataset_id)
            plans = explorer_plans(candidates, epsilon, dataset_delta(dataset), dataset.metric)
            return {"epsilon": epsilon, "names": names, "plans": plans}

    return JSONResponse(_finite(await run_in_threadpool(run)))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


#: The last frontiers, by dataset, delta and the models' mechanisms.
_FRONTIERS: Lru[tuple[Any, ...], Frontier] = Lru(32)


@router.get("/datasets/{dataset_id}/frontier.svg")
async def frontier_svg(dataset_id: str, ctx: ContextDep, who: Viewer) -> Response:
    def run() -> str:
        with session_scope(ctx.session_factory) as session:
            dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
            candidates, names = _candidates(session, ctx, dataset_id)
            delta = dataset_delta(dataset)
            key = (
                dataset_id,
                delta,
                tuple(sorted((c.id, c.profile.mechanism_hash) for c in candidates)),
            )
            frontier = _FRONTIERS.get(key)
            if frontier is None:
                frontier = compute_frontier(candidates, names, delta)
                _FRONTIERS.put(key, frontier)
            return render(frontier.chart(f"{dataset.name}: RS vs LC (delta {delta:g})"))

    return Response(await run_in_threadpool(run), media_type="image/svg+xml")


# ---- releases and ledger -----------------------------------------------------------------


@router.get("/datasets/{dataset_id}/releases", response_class=HTMLResponse)
def releases_page(request: Request, dataset_id: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        releases = repository.list_releases(session=session, dataset_id=dataset_id)
        names = {
            m.id: m.name
            for m in session.scalars(select(Model).where(Model.dataset_id == dataset_id))
        }
        running: list[dict[str, Any]] = []
        bound = None
        try:
            for i in range(len(releases)):
                b = release_service.ledger_bound(
                    session=session,
                    jobs=ctx.jobs,
                    dataset=dataset,
                    releases=[
                        (list(r.exposed_model_ids), r.epsilon, r.delta) for r in releases[: i + 1]
                    ],
                )
                running.append({"r": releases[i], "cumulative": round_up(b.epsilon)})
                bound = b
        except ProfilesPending:
            running = [{"r": r, "cumulative": None} for r in releases]
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
            safe_url=safe_url,
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
            safe_url=safe_url,
        )


def _delivery(ctx: AppContext, d: WebhookDelivery) -> dict[str, Any]:
    """A webhook delivery with the outcome of the job it started."""
    job_id = ((d.response or {}).get("job") or {}).get("id")
    outcome = None
    if job_id:
        try:
            info = ctx.jobs.get(job_id)
            outcome = info.status + (f": {info.error}" if info.error else "")
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


def install(app: FastAPI, settings: Settings) -> None:
    """Mount the dashboard, its static files and the login redirect on ``app``."""
    app.state.session_signer = SessionSigner(settings.session_secret, settings.session_ttl_s)

    async def to_login(request: Request, exc: Exception) -> Response:
        return RedirectResponse("/admin/login", status_code=303)

    app.add_exception_handler(LoginRequired, to_login)
    app.mount("/admin/static", StaticFiles(directory=str(HERE / "static")), name="admin-static")
    app.include_router(router)
