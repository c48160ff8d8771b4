"""What a policy-change or notification job does, given where it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.errors import RetargetError
from service.jobs import deployments
from service.jobs.queue import Jobs
from service.registry.blobs import BlobStore


@dataclass
class WorkContext:
    settings: Settings
    session_factory: sessionmaker[Session]
    blobs: BlobStore
    jobs: Jobs


def run_policy_change(
    ctx: WorkContext,
    deployment: str,
    epsilon: float,
    delta: float,
    reason: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """Re-target; a refused policy is a finished job whose result says why (no retry)."""
    try:
        dep_id, release_id = deployments.change_policy(
            session_factory=ctx.session_factory,
            jobs=ctx.jobs,
            blobs=ctx.blobs,
            name=deployment,
            epsilon=epsilon,
            delta=delta,
            reason=reason,
            source=source,
        )
    except RetargetError as exc:
        return {"status": "refused", "deployment": deployment, "reason": exc.detail}
    if ctx.settings.callback_secret:
        ctx.jobs.submit("notify", {"deployment_id": dep_id}, background=True)
    return {"status": "changed", "deployment": deployment, "release_id": release_id}


def run_notify(ctx: WorkContext, deployment_id: str) -> dict[str, Any]:
    ok = deployments.notify(
        session_factory=ctx.session_factory,
        deployment_id=deployment_id,
        secret=ctx.settings.callback_secret or "",
        delays_s=list(ctx.settings.callback_retry_delays_s),
    )
    return {"status": "delivered" if ok else "failed", "deployment_id": deployment_id}


RUNNERS: dict[str, Callable[..., Any]] = {"policy_change": run_policy_change, "notify": run_notify}
