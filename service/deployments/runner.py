"""What a deployment job does, given where it runs: one attempt at an outbox item.

A policy change (from a signed webhook) is applied once and finished in the same
transaction; a refused one is finished with its reason (no retry); a transient failure
(the dataset busy, storage down, profiles pending) is retried later from the queue.
A notification makes one POST per attempt and schedules the next one on the queue.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.deployments import follow, notifications, outbox
from service.deployments import policies as deployments
from service.deployments.callbacks import AllowList
from service.errors import RetargetError
from service.jobs.queue import Jobs
from service.plans.tasks import Compute, in_thread
from service.profiles.source import ProfileSource
from service.registry.blobs import BlobStore
from service.registry.db import session_scope
from service.registry.models import Deployment, Release

log = logging.getLogger(__name__)

#: waits before the retries of a policy change that failed for a passing reason
POLICY_RETRY_DELAYS_S = (10.0, 60.0, 300.0)


class Where(Protocol):
    """Where deployment jobs run: a worker's ``WorkContext`` or the API's context."""

    settings: Settings
    session_factory: sessionmaker[Session]
    blobs: BlobStore
    jobs: Jobs
    profiles: ProfileSource


@dataclass
class WorkContext:
    settings: Settings
    session_factory: sessionmaker[Session]
    blobs: BlobStore
    jobs: Jobs
    profiles: ProfileSource


def compute_for(ctx: Where) -> Compute:
    """Where a deployment job's plan runs: the API's plan processes (embedded mode, its
    context has them), else in the worker's job (RQ's job timeout bounds it)."""
    plan_jobs = getattr(ctx, "plan_jobs", None)
    return plan_jobs.compute if plan_jobs is not None else in_thread


def lease_s(settings: Settings) -> float:
    """How long an item on the queue is left alone before a drain queues it again."""
    return settings.job_timeout_s + 60.0


def drain(ctx: Where, overdue_only: bool = True) -> int:
    """Queue every due outbox item (see ``service.deployments.outbox``)."""
    return outbox.drain(
        session_factory=ctx.session_factory,
        jobs=ctx.jobs,
        lease_s=lease_s(ctx.settings),
        overdue_only=overdue_only,
    )


def dispatch(ctx: Where, item_id: str | None) -> None:
    """Queue an item just committed (a drain does it later if the queue is down)."""
    if item_id is not None:
        outbox.dispatch(
            session_factory=ctx.session_factory,
            jobs=ctx.jobs,
            item_id=item_id,
            lease_s=lease_s(ctx.settings),
        )


def run_outbox(ctx: Where, item_id: str, attempt: int) -> dict[str, Any]:
    """Attempt ``attempt`` at an outbox item; a duplicate or stale attempt does nothing."""
    item = outbox.claim(ctx.session_factory, item_id, attempt, lease_s(ctx.settings))
    if item is None:
        return {"status": "skipped", "item": item_id}
    claimed = (item_id, attempt + 1)
    try:
        if item.kind in ("policy_change", follow.KIND):
            return _policy_change(ctx, item.payload, claimed)
        if item.kind == "notify":
            return _notify(ctx, item.payload, claimed)
    except outbox.Superseded:
        return {"status": "skipped", "item": item_id}
    _finish(ctx, claimed, "failed", {"status": "failed", "reason": f"unknown kind {item.kind}"})
    return {"status": "failed", "item": item_id}


def _finish(ctx: Where, claimed: tuple[str, int], status: str, result: dict) -> None:
    with contextlib.suppress(outbox.Superseded), session_scope(ctx.session_factory) as session:
        outbox.finish(session, *claimed, status, result)


def _policy_change(ctx: Where, payload: dict[str, Any], claimed: tuple[str, int]) -> dict[str, Any]:
    """A policy change from a webhook, or (no ``epsilon``: an alias move's re-target,
    ``service.deployments.follow``) the deployment's current policy planned again; that
    one neither moves nor checks the policy's version, so it never rolls a policy back."""
    name = payload["deployment"]
    try:
        change = deployments.change_policy(
            session_factory=ctx.session_factory,
            profiles=ctx.profiles,
            blobs=ctx.blobs,
            name=name,
            epsilon=payload.get("epsilon"),
            delta=payload.get("delta"),
            reason=payload.get("reason"),
            source=payload.get("source"),
            version=int(payload.get("version", 0)),
            refuse_older="epsilon" in payload,
            notify=bool(ctx.settings.callback_secret),
            item=claimed,
            compute=compute_for(ctx),
        )
    except deployments.TRANSIENT as exc:
        return _retry_policy(ctx, claimed, exc.detail)
    except RetargetError as exc:
        # finished with the failure's record, or (an unknown deployment) here
        refused = {"status": "refused", "deployment": name, "reason": exc.detail}
        _finish(ctx, claimed, "done", refused)
        return refused
    dispatch(ctx, change.notify_item)
    return {"status": "changed", "deployment": name, "release_id": change.release_id}


def _retry_policy(ctx: Where, claimed: tuple[str, int], reason: str) -> dict[str, Any]:
    item_id, attempts = claimed
    if attempts > ctx.settings.job_retries:
        failed = {"status": "failed", "reason": f"after {attempts} attempts: {reason}"}
        _finish(ctx, claimed, "failed", failed)
        return failed
    outbox.note(ctx.session_factory, item_id, {"status": "retrying", "reason": reason})
    delay = POLICY_RETRY_DELAYS_S[min(attempts - 1, len(POLICY_RETRY_DELAYS_S) - 1)]
    outbox.schedule_retry(
        session_factory=ctx.session_factory,
        jobs=ctx.jobs,
        item_id=item_id,
        attempts=attempts,
        delay_s=delay,
        lease_s=lease_s(ctx.settings),
    )
    return {"status": "retrying", "reason": reason, "in_s": delay}


def _notify(ctx: Where, payload: dict[str, Any], claimed: tuple[str, int]) -> dict:
    settings = ctx.settings
    deployment_id = payload["deployment_id"]
    url = notifications.callback_url(ctx.session_factory, deployment_id)
    if url is None or not settings.callback_secret:
        _finish(ctx, claimed, "done", {"status": "skipped", "reason": "no callback"})
        return {"status": "skipped", "deployment_id": deployment_id}
    delivered, outcome = notifications.attempt_notification(
        session_factory=ctx.session_factory,
        url=url,
        payload=payload,
        secret=settings.callback_secret,
        allow=AllowList.parse(settings.callback_allow),
        connect_timeout_s=settings.callback_connect_timeout_s,
        read_timeout_s=settings.callback_read_timeout_s,
    )
    item_id, attempts = claimed
    delays = list(settings.callback_retry_delays_s)
    if delivered or attempts > len(delays):
        notifications.record_outcome(
            session_factory=ctx.session_factory,
            item=claimed,
            deployment_id=deployment_id,
            release_id=payload["body"].get("release_id"),
            delivered=delivered,
            outcome=outcome,
            final=True,
        )
        return {"status": "delivered" if delivered else "failed", "outcome": outcome}
    outbox.note(ctx.session_factory, item_id, {"status": "retrying", "outcome": outcome})
    outbox.schedule_retry(
        session_factory=ctx.session_factory,
        jobs=ctx.jobs,
        item_id=item_id,
        attempts=attempts,
        delay_s=delays[attempts - 1],
        lease_s=lease_s(settings),
    )
    return {"status": "retrying", "outcome": outcome, "in_s": delays[attempts - 1]}


def run_policy_change(
    ctx: Where,
    deployment: str,
    epsilon: float,
    delta: float,
    reason: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A policy-change job queued before the outbox existed (kept for jobs in flight)."""
    try:
        change = deployments.change_policy(
            session_factory=ctx.session_factory,
            profiles=ctx.profiles,
            blobs=ctx.blobs,
            name=deployment,
            epsilon=epsilon,
            delta=delta,
            reason=reason,
            source=source,
            version=int(time.time()),
            refuse_older=False,
            notify=bool(ctx.settings.callback_secret),
            compute=compute_for(ctx),
        )
    except RetargetError as exc:
        return {"status": "refused", "deployment": deployment, "reason": exc.detail}
    dispatch(ctx, change.notify_item)
    return {"status": "changed", "deployment": deployment, "release_id": change.release_id}


def run_notify(ctx: Where, deployment_id: str) -> dict[str, Any]:
    """A notification job queued before the outbox existed: announce the current release
    through the outbox."""
    with session_scope(ctx.session_factory) as session:
        dep = session.get(Deployment, deployment_id)
        release = session.get(Release, dep.current_release_id) if dep is not None else None
        if dep is None or release is None or not dep.callback_url:
            return {"status": "skipped", "deployment_id": deployment_id}
        body = deployments.notification(session, dep, release)
        item_id = outbox.add(session, "notify", {"deployment_id": dep.id, "body": body}).id
    dispatch(ctx, item_id)
    return {"status": "queued", "deployment_id": deployment_id}
