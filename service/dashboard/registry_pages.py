"""Dashboard pages of datasets and models: lists, profiles and their charts, downloads."""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import func, select

from service.accounting.conversions import ORDERS, round_up
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import PrivacyProfile
from service.api.blob_responses import blob_response, not_modified
from service.api.deps import AppContext, ContextDep
from service.dashboard.common import (
    Viewer,
    dataset_delta,
    mechanism_summary,
    model_epsilons,
    model_profiles,
    page,
    session_post_checked,
    svg_response,
    viewer_can,
)
from service.dashboard.svg import Chart, Series
from service.errors import Forbidden, StorageError, Unsupported
from service.ledger.charges import expose
from service.profiles.source import profiles_or_pending
from service.registry import repository
from service.registry.db import session_scope
from service.registry.keys import DOWNLOAD_SCOPE
from service.registry.model_rows import visible_metrics
from service.registry.models import Dataset, Model, Release

router = APIRouter(prefix="/admin", include_in_schema=False)

#: Models per dataset page (``?offset=&limit=``, at most MAX_PAGE).
PAGE_SIZE = 100
MAX_PAGE = 500


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


@router.get("/datasets/{dataset_id}", response_class=HTMLResponse)
def dataset_page(
    request: Request,
    dataset_id: str,
    ctx: ContextDep,
    who: Viewer,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE_SIZE,
) -> HTMLResponse:
    """One page of the dataset's models (oldest first), each with its epsilon: one
    profile and one cached epsilon per distinct mechanism on the page."""
    with session_scope(ctx.session_factory) as session:
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        where = Model.dataset_id == dataset_id
        total = session.scalar(select(func.count()).select_from(Model).where(where)) or 0
        models = list(
            session.scalars(
                select(Model)
                .where(where)
                .order_by(Model.created_at, Model.id)
                .offset(offset)
                .limit(limit)
            )
        )
        delta = dataset_delta(dataset)
        epsilons, pending = model_epsilons(ctx, models, delta)
        rows = [
            {
                "m": m,
                "summary": mechanism_summary(m.mechanism),
                "epsilon": round_up(e) if isinstance(e, float) and math.isfinite(e) else e,
                # a read session sees only metrics declared 'prior' (docs/utility.md)
                "metrics": visible_metrics(m, show_all="admin" in who.scopes)[0],
            }
            for m, e in zip(models, epsilons, strict=True)
        ]
        return page(
            request,
            "dataset.html",
            who,
            dataset=dataset,
            rows=rows,
            delta=delta,
            pending=pending,
            total=total,
            offset=offset,
            limit=limit,
        )


@router.get("/models/{model_id}", response_class=HTMLResponse)
def model_page(request: Request, model_id: str, ctx: ContextDep, who: Viewer) -> HTMLResponse:
    with session_scope(ctx.session_factory) as session:
        model = repository.get_model(session=session, model_id=model_id)
        dataset = repository.get_dataset(session=session, dataset_id=model.dataset_id)
        profiles = model_profiles(ctx, [model])
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
            metrics=visible_metrics(model, show_all="admin" in who.scopes),
            summary=mechanism_summary(model.mechanism),
            table=table,
            pending=profiles is None,
        )


def _model_profile(ctx: AppContext, model_id: str) -> PrivacyProfile:
    with session_scope(ctx.session_factory) as session:
        model = repository.get_model(session=session, model_id=model_id)
        (profile,) = profiles_or_pending(
            ctx.profiles, [("model", parse_mechanism(model.mechanism))]
        )
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


@router.post("/models/{model_id}/weights")
def model_weights(
    model_id: str,
    request: Request,
    ctx: ContextDep,
    who: Viewer,
    csrf: Annotated[str, Form()] = "",
) -> Response:
    """Raw weights of a registered model: as ``GET /v1/models/{id}/weights``, only for
    keys with scope ``models:download``, and every download is charged to the ledger.
    A charge is a side effect, so this is a POST from the model's page: same origin,
    with the session's CSRF token (``service.dashboard.auth``)."""
    if not session_post_checked(request, csrf):
        raise Forbidden("the form expired or came from elsewhere; download from the model's page")
    if not viewer_can(who, DOWNLOAD_SCOPE):
        raise Forbidden(f"raw model weights need an API key with scope {DOWNLOAD_SCOPE!r}")
    with session_scope(ctx.session_factory) as session:
        model = repository.get_model(session=session, model_id=model_id)
        sha, name = model.sha256, f"{model.name}-v{model.version}.safetensors"
        if model.files is not None:
            raise Unsupported(f"model {model_id!r} is a {model.kind} bundle, not one file")
        if not not_modified(request, sha):
            if not ctx.blobs.exists(sha):
                raise StorageError(f"blob {sha} is missing from the store")
            expose(
                session=session,
                profiles=ctx.profiles,
                dataset_id=model.dataset_id,
                kind="download",
                model_ids=[model.id],
                key_id=who.id,
                key_name=who.name,
            )
    return blob_response(request, ctx.blobs, sha, name)
