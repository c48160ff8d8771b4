from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from service.api.deps import ContextDep
from service.api.routes.jobs import job_public
from service.api.schemas import PolicyChangeWebhook, Problem, WebhookAccepted
from service.errors import InvalidInput, Unauthenticated
from service.jobs.signing import verify
from service.registry.db import session_scope
from service.registry.models import WebhookDelivery

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

MAX_BODY = 64 * 1024


@router.post(
    "/policy-change",
    operation_id="webhooks_policy_change",
    status_code=202,
    response_model=WebhookAccepted,
    responses={401: {"model": Problem}, 422: {"model": Problem}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": PolicyChangeWebhook.model_json_schema()}},
        },
        "parameters": [
            {
                "name": "X-Retarget-Signature",
                "in": "header",
                "required": True,
                "schema": {"type": "string"},
                "description": 't=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">',
            },
            {
                "name": "X-Retarget-Delivery",
                "in": "header",
                "required": True,
                "schema": {"type": "string"},
                "description": "unique per delivery (idempotency)",
            },
            {
                "name": "X-Retarget-Source",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "whose secret signed it (default: default)",
            },
        ],
    },
)
async def policy_change(request: Request, ctx: ContextDep) -> JSONResponse:
    """A signed policy change: verified by HMAC-SHA256 with the source's secret, refused
    outside a 5-minute window, idempotent on the delivery id (a replay changes nothing and
    answers with the first result). Accepted changes run as a job (202)."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise InvalidInput(f"webhook body over {MAX_BODY} bytes")
    source = request.headers.get("x-retarget-source", "default")
    secret = ctx.settings.webhook_secrets.get(source)
    if not secret:
        raise Unauthenticated(f"no webhook secret is configured for source {source!r}")
    reason = verify(
        secret,
        raw,
        request.headers.get("x-retarget-signature", ""),
        ctx.settings.webhook_tolerance_s,
    )
    if reason:
        raise Unauthenticated(f"webhook refused: {reason}")
    delivery = request.headers.get("x-retarget-delivery", "").strip()
    if not delivery or len(delivery) > 200:
        raise InvalidInput("X-Retarget-Delivery must be a non-empty id of at most 200 characters")
    try:
        body = PolicyChangeWebhook.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise InvalidInput(f"invalid policy change: {exc}") from exc

    def run() -> JSONResponse:
        key = f"{source}:{delivery}"
        try:
            # claim the delivery id first, in its own transaction: a replay (even a
            # concurrent one) then finds it and runs nothing
            with session_scope(ctx.session_factory) as session:
                session.add(WebhookDelivery(id=key, source=source, status_code=202, response={}))
        except IntegrityError:
            with session_scope(ctx.session_factory) as session:
                seen = session.get(WebhookDelivery, key)
                assert seen is not None
                answer = seen.response or {"delivery": delivery, "status": "processing"}
                return JSONResponse(
                    answer, status_code=seen.status_code, headers={"X-Retarget-Replay": "true"}
                )
        job = ctx.jobs.submit(
            "policy_change",
            {
                "deployment": body.deployment,
                "epsilon": body.epsilon,
                "delta": body.delta,
                "reason": body.reason,
                "source": f"webhook:{source}",
            },
        )
        answer = WebhookAccepted(
            delivery=delivery, deployment=body.deployment, job=job_public(job)
        ).model_dump(mode="json")
        with session_scope(ctx.session_factory) as session:
            row = session.get(WebhookDelivery, key)
            assert row is not None
            row.response = answer
        return JSONResponse(answer, status_code=202)

    return await run_in_threadpool(run)
