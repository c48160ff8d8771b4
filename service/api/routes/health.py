from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from service.api.deps import ContextDep

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
    reachable, and with Redis a worker is alive to compute queued jobs."""
    checks: dict[str, Any] = {}
    try:
        with ctx.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    checks["blobs"] = "ok" if ctx.blobs.ready() else "unreachable"
    # "in-process" (the embedded default: no Redis) is ready too
    checks["cache"] = ctx.jobs.ready()[1]
    # with Redis, profiles and deployment jobs wait for a worker: none alive is not ready
    checks["workers"] = ctx.jobs.workers()
    ready = all(v in ("ok", "in-process") for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks},
        status_code=200 if ready else 503,
    )


@router.get("/metrics", response_class=PlainTextResponse, operation_id="operations_metrics")
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text format: job and profile-cache counters, queue sizes."""
    return PlainTextResponse(
        generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST
    )
