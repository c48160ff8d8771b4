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
from service.deployments import outbox
from service.deployments import policies as deployment_service
from service.deployments.runner import dispatch
from service.deployments.signing import signed_timestamp, verify
from service.errors import InvalidInput, NotFound, Unauthenticated
from service.jobs.queue import JobInfo
from service.registry.db import session_scope
from service.registry.models import WebhookDelivery

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

MAX_BODY = 64 * 1024
SIGNATURE_HELP = (
    't=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<delivery id>.<raw body>">; '
    "several v1= entries may be sent (secret rotation)"
)


@router.post(
    "/policy-change",
    operation_id="webhooks_policy_change",
    status_code=202,
    response_model=WebhookAccepted,
    responses={
        401: {"model": Problem},
        404: {"model": Problem},
        409: {"model": Problem},
        422: {"model": Problem},
    },
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
                "description": SIGNATURE_HELP,
            },
            {
                "name": "X-Retarget-Delivery",
                "in": "header",
                "required": True,
                "schema": {"type": "string", "pattern": "^[!-\\-/-~]{1,200}$"},
                "description": "unique per delivery (idempotency), covered by the signature: "
                "1-200 visible ASCII characters without a dot",
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
    """A signed policy change: HMAC-SHA256 over timestamp, delivery id and body with the
    source's secret, refused outside the replay window (5 minutes by default), idempotent
    on the delivery id (a replay changes nothing and answers with the first result), and
    refused (409) when its version is older than the deployment's current policy. The
    delivery and its work (an outbox item) are stored in one transaction; the work runs
    as a job (202), queued again later if the queue is down, and is applied once."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise InvalidInput(f"webhook body over {MAX_BODY} bytes")
    source = request.headers.get("x-retarget-source", "default")
    secret = ctx.settings.webhook_secrets.get(source)
    if not secret:
        raise Unauthenticated(f"no webhook secret is configured for source {source!r}")
    header = request.headers.get("x-retarget-signature", "")
    delivery = request.headers.get("x-retarget-delivery", "").strip()
    reason = verify(secret, delivery, raw, header, ctx.settings.webhook_tolerance_s)
    if reason:
        raise Unauthenticated(f"webhook refused: {reason}")
    try:
        body = PolicyChangeWebhook.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise InvalidInput(f"invalid policy change: {exc}") from exc
    timestamp = signed_timestamp(header)
    assert timestamp is not None  # verified above
    version = body.version if body.version is not None else timestamp

    def answer(delivered: WebhookDelivery, replay: bool) -> JSONResponse:
        stored = delivered.response or {}
        job_id = str((stored.get("job") or {}).get("id") or "")
        try:
            job = outbox.find_job(ctx.session_factory, ctx.jobs, job_id)
        except NotFound:  # a job the queue no longer keeps
            job = JobInfo(id=job_id, kind="policy_change", status="unknown")
        public = WebhookAccepted(
            delivery=delivery, deployment=str(stored.get("deployment", "")), job=job_public(job)
        ).model_dump(mode="json")
        headers = {"X-Retarget-Replay": "true"} if replay else None
        return JSONResponse(public, status_code=delivered.status_code, headers=headers)

    def run() -> JSONResponse:
        key = f"{source}:{delivery}"
        with session_scope(ctx.session_factory) as session:
            seen = session.get(WebhookDelivery, key)
        if seen is not None:
            # a replay: answer as the first time; its work is queued again if still due
            first_job = (seen.response or {}).get("job") or {}
            dispatch(ctx, outbox.item_id(str(first_job.get("id", ""))))
            return answer(seen, replay=True)
        try:
            # the delivery and its work, together or not at all
            with session_scope(ctx.session_factory) as session:
                dep = deployment_service.get_deployment(session=session, name=body.deployment)
                deployment_service.check_order(dep, version)
                item = outbox.add(
                    session,
                    "policy_change",
                    {
                        "deployment": body.deployment,
                        "epsilon": body.epsilon,
                        "delta": body.delta,
                        "reason": body.reason,
                        "source": f"webhook:{source}",
                        "version": version,
                    },
                )
                row = WebhookDelivery(
                    id=key,
                    source=source,
                    status_code=202,
                    response={
                        "delivery": delivery,
                        "deployment": body.deployment,
                        "job": {"id": outbox.job_id(item.id)},
                    },
                )
                session.add(row)
                session.flush()
        except IntegrityError:
            # the same delivery, concurrently: the first one stored it and runs it
            with session_scope(ctx.session_factory) as session:
                seen = session.get(WebhookDelivery, key)
            if seen is None:
                raise
            return answer(seen, replay=True)
        dispatch(ctx, item.id)
        return answer(row, replay=False)

    return await run_in_threadpool(run)
