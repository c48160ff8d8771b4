from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from service.api.deps import ContextDep, require
from service.errors import NotFound

router = APIRouter(tags=["operations"])


@router.get("/healthz", operation_id="operations_health")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={503: {"description": "a dependency is unreachable"}},
    operation_id="operations_ready",
)
def readyz(ctx: ContextDep) -> JSONResponse:
    """The database, the blob store and the profile cache (Redis, when configured) are
    reachable, the blob store has at least ``RETARGET_READYZ_MIN_FREE_BYTES`` free, and
    with Redis a worker is alive to compute queued jobs. ``notices`` says what works
    but is missing, without making the service unready: no worker on the merge queue
    (large releases stay pending until one comes)."""
    checks: dict[str, Any] = {}
    try:
        with ctx.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    checks["blobs"] = "ok" if ctx.blobs.ready() else "unreachable"
    free = ctx.blobs.free_bytes()
    need = ctx.settings.readyz_min_free_bytes
    checks["disk"] = (
        "ok" if free is None or free >= need else f"low: {free} bytes free, {need} needed"
    )
    # "in-process" (the embedded default: no Redis) is ready too
    checks["cache"] = ctx.jobs.ready()[1]
    # with Redis, profiles and deployment jobs wait for a worker: none alive is not ready
    checks["workers"] = ctx.jobs.workers()
    ready = all(v in ("ok", "in-process") for v in checks.values())
    # releases above RETARGET_RELEASE_ASYNC_BYTES wait for a merge worker; without one they
    # stay pending, but everything else works: said here, not a reason to take the API out
    merges = ctx.jobs.merge_workers()
    notices = {} if merges in ("ok", "in-process") else {"merge_workers": merges}
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks, "notices": notices},
        status_code=200 if ready else 503,
    )


_read = require("read").dependency


def metrics_access(request: Request, ctx: ContextDep) -> None:
    """``RETARGET_METRICS``: key (an API key with the read scope), open, or off (404)."""
    if ctx.settings.metrics == "off":
        raise NotFound("metrics are switched off (RETARGET_METRICS=off)")
    if ctx.settings.metrics == "key":
        _read(request, ctx)


metrics_access.required_scope = "read"  # type: ignore[attr-defined]


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    dependencies=[Depends(metrics_access)],
    operation_id="operations_metrics",
)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text format: job and profile-cache counters, queue sizes. Needs an API
    key with the read scope unless ``RETARGET_METRICS=open`` (``off``: 404)."""
    return PlainTextResponse(
        generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST
    )
