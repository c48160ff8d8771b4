"""problem+json (RFC 9457) for every error; the only place that maps domain errors to HTTP."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service import errors

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"

#: Domain error class -> (HTTP status, stable problem type slug, title). The
#: most specific class is looked up first along the class's MRO.
TABLE: dict[type[errors.RetargetError], tuple[int, str, str]] = {
    errors.InvalidUpload: (422, "invalid-upload", "Invalid checkpoint upload"),
    errors.ProfileTooCostly: (422, "profile-too-costly", "Profile too costly to compute"),
    errors.InvalidInput: (422, "invalid-input", "Invalid input"),
    errors.PayloadTooLarge: (413, "payload-too-large", "Payload too large"),
    errors.Unauthenticated: (401, "unauthorized", "Unauthorized"),
    errors.Forbidden: (403, "forbidden", "Forbidden"),
    errors.NotFound: (404, "not-found", "Not found"),
    errors.BudgetExceeded: (409, "budget-exceeded", "Privacy budget exceeded"),
    errors.Conflict: (409, "conflict", "Conflict"),
    errors.InfeasibleTarget: (422, "infeasible-target", "Target not reachable"),
    errors.Unsupported: (422, "unsupported", "Analysis does not apply"),
    errors.Busy: (429, "busy", "Busy, retry later"),
    errors.ComputeLimitExceeded: (422, "compute-limit-exceeded", "Computation over its limits"),
    errors.StorageError: (503, "storage-unavailable", "Storage unavailable"),
    errors.ProfileFailed: (422, "profile-failed", "Profile computation failed"),
    errors.ProfilesPending: (503, "profiles-pending", "Profiles are being computed"),
    errors.RetargetError: (500, "internal-error", "Internal error"),
}

_HTTP_SLUGS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    413: "payload-too-large",
    415: "unsupported-media-type",
}


def problem_type(slug: str) -> str:
    return f"urn:retarget:problem:{slug}"


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": problem_type(slug),
        "title": title,
        "status": status,
        "detail": detail,
    }
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def for_domain_error(exc: errors.RetargetError) -> JSONResponse:
    for cls in type(exc).__mro__:
        if cls in TABLE:
            status, slug, title = TABLE[cls]
            break
    headers = {"WWW-Authenticate": 'Bearer realm="retarget"'} if status == 401 else None
    if status == 429:
        headers = {"Retry-After": "1"}
    return problem(status, slug, title, exc.detail, headers=headers, **exc.extra)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":  # loc is ("body", <character offset>)
            at = err.get("loc", ("body", "?"))[-1]
            reason = (err.get("ctx") or {}).get("error", "")
            out.append(
                {
                    "field": "body",
                    "message": f"the body is not valid JSON (at character {at})"
                    + (f": {reason}" if reason else ""),
                }
            )
            continue
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        out.append({"field": ".".join(loc), "message": str(err.get("msg", ""))})
    return out


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.RetargetError)
    async def _domain(_: Request, exc: errors.RetargetError) -> JSONResponse:
        return for_domain_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = _validation_errors(exc)
        detail = "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errs[:5])
        return problem(422, "validation-error", "Invalid request", detail, errors=errs)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        slug = _HTTP_SLUGS.get(exc.status_code, f"http-{exc.status_code}")
        title = slug.replace("-", " ").capitalize()
        return problem(
            exc.status_code, slug, title, str(exc.detail), headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(OperationalError)
    async def _database_down(request: Request, exc: OperationalError) -> JSONResponse:
        # the database restarting or unreachable: the pool reconnects by itself
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return problem(
            503,
            "storage-unavailable",
            "Storage unavailable",
            "the database is unreachable; try again shortly",
            headers={"Retry-After": "2"},
        )

    @app.exception_handler(PoolTimeoutError)
    async def _pool_exhausted(request: Request, exc: PoolTimeoutError) -> JSONResponse:
        # every connection of the pool is taken: the caller retries, nothing was done
        log.warning("connection pool exhausted on %s %s", request.method, request.url.path)
        return for_domain_error(errors.Busy("the service is busy; retry shortly"))

    @app.exception_handler(StatementError)
    async def _statement(request: Request, exc: StatementError) -> JSONResponse:
        # a value the database cannot hold (a NUL character on Postgres, an integer
        # past 64 bits on SQLite) is bad input, refused before anything is stored
        if isinstance(exc.orig, ValueError | OverflowError):
            reason = str(exc.orig).split("\n")[0]
            return problem(
                422, "invalid-input", "Invalid input", f"a value cannot be stored: {reason}"
            )
        return await _unexpected(request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "internal-error", "Internal error", "an unexpected error occurred")
