"""Deployments: a name serving the current release of a dataset under a policy.

A policy change plans and releases anew and points the deployment at the new
release; if the new policy cannot be met, the deployment keeps serving the
previous release and the failed change is recorded with its reason.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from service.accounting.planning import PlanRequestSpec
from service.errors import Conflict, InvalidInput, NotFound, RetargetError
from service.jobs import releases as release_service
from service.jobs.queue import Jobs
from service.jobs.signing import sign
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.db import session_scope
from service.registry.models import Deployment, DeploymentEvent, Release

log = logging.getLogger(__name__)


def get_deployment(*, session: Session, name: str) -> Deployment:
    row = session.scalar(select(Deployment).where(Deployment.name == name))
    if row is None:
        raise NotFound(f"no deployment named {name!r}")
    return row


def list_deployments(
    *, session: Session, offset: int = 0, limit: int | None = None
) -> list[Deployment]:
    query = select(Deployment).order_by(Deployment.created_at, Deployment.id).offset(offset)
    return list(session.scalars(query.limit(limit) if limit is not None else query))


def count_deployments(*, session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Deployment)) or 0


def events(*, session: Session, deployment_id: str, limit: int = 100) -> list[DeploymentEvent]:
    return list(
        session.scalars(
            select(DeploymentEvent)
            .where(DeploymentEvent.deployment_id == deployment_id)
            .order_by(DeploymentEvent.created_at.desc(), DeploymentEvent.id)
            .limit(limit)
        )
    )


def _spec(dep: Deployment, epsilon: float, delta: float) -> PlanRequestSpec:
    return PlanRequestSpec(
        epsilon=epsilon,
        delta=delta,
        method=dep.method,  # type: ignore[arg-type]
        accountant=dep.accountant,  # type: ignore[arg-type]
    )


def create_deployment(
    *,
    session: Session,
    jobs: Jobs,
    blobs: BlobStore,
    name: str,
    dataset_id: str,
    epsilon: float,
    delta: float,
    method: str,
    accountant: str,
    callback_url: str | None,
    callback_secret: str | None,
) -> tuple[Deployment, Release]:
    """A new deployment and its first release; nothing is stored if the release fails."""
    if session.scalar(select(Deployment.id).where(Deployment.name == name)) is not None:
        raise Conflict(f"a deployment named {name!r} already exists")
    if callback_url is not None and not callback_secret:
        raise InvalidInput(
            "callback_url needs RETARGET_CALLBACK_SECRET on the server (notifications are signed)"
        )
    repository.get_dataset(session=session, dataset_id=dataset_id)
    dep = Deployment(
        name=name,
        dataset_id=dataset_id,
        epsilon=epsilon,
        delta=delta,
        method=method,
        accountant=accountant,
        callback_url=callback_url,
    )
    release, _ = release_service.retarget(
        session=session,
        jobs=jobs,
        blobs=blobs,
        dataset_id=dataset_id,
        model_ids=None,
        spec=_spec(dep, epsilon, delta),
        deployment=name,
    )
    dep.current_release_id = release.id
    session.add(dep)
    session.flush()
    session.add(
        DeploymentEvent(
            deployment_id=dep.id,
            kind="created",
            epsilon=epsilon,
            delta=delta,
            release_id=release.id,
        )
    )
    session.flush()
    return dep, release


def change_policy(
    *,
    session_factory: sessionmaker[Session],
    jobs: Jobs,
    blobs: BlobStore,
    name: str,
    epsilon: float,
    delta: float,
    reason: str | None,
    source: str | None,
) -> tuple[str, str]:
    """Re-target a deployment: (deployment id, new release id).

    On a domain error (infeasible target, cap, unsupported) the deployment keeps its
    release, the failure is recorded in its history, and the error is raised.
    """
    with session_scope(session_factory) as session:
        get_deployment(session=session, name=name)  # an unknown name is a plain 404
    try:
        with session_scope(session_factory) as session:
            dep = get_deployment(session=session, name=name)
            release, _ = release_service.retarget(
                session=session,
                jobs=jobs,
                blobs=blobs,
                dataset_id=dep.dataset_id,
                model_ids=None,
                spec=_spec(dep, epsilon, delta),
                deployment=name,
            )
            dep.epsilon, dep.delta = epsilon, delta
            dep.current_release_id = release.id
            dep.last_error = None
            dep.updated_at = datetime.now(UTC)
            session.add(
                DeploymentEvent(
                    deployment_id=dep.id,
                    kind="policy_changed",
                    epsilon=epsilon,
                    delta=delta,
                    release_id=release.id,
                    reason=reason,
                    source=source,
                )
            )
            return dep.id, release.id
    except RetargetError as exc:
        with session_scope(session_factory) as session:
            dep = get_deployment(session=session, name=name)
            dep.last_error = exc.detail
            dep.updated_at = datetime.now(UTC)
            session.add(
                DeploymentEvent(
                    deployment_id=dep.id,
                    kind="policy_failed",
                    epsilon=epsilon,
                    delta=delta,
                    release_id=dep.current_release_id,
                    reason=f"{reason + ': ' if reason else ''}{exc.detail}",
                    source=source,
                )
            )
        raise


def notification(session: Session, deployment_id: str) -> tuple[str | None, dict[str, Any]]:
    dep = session.get(Deployment, deployment_id)
    if dep is None:
        raise NotFound(f"no deployment with id {deployment_id!r}")
    release = session.get(Release, dep.current_release_id) if dep.current_release_id else None
    body = {
        "deployment": dep.name,
        "release_id": dep.current_release_id,
        "sha256": release.sha256 if release else None,
        "epsilon": dep.epsilon,
        "delta": dep.delta,
        "model_url": f"/v1/deployments/{dep.name}/model",
    }
    return dep.callback_url, body


def notify(
    *,
    session_factory: sessionmaker[Session],
    deployment_id: str,
    secret: str,
    delays_s: list[float],
    timeout_s: float = 10.0,
) -> bool:
    """POST the signed notification, retrying after each delay; record the outcome."""
    with session_scope(session_factory) as session:
        url, body = notification(session, deployment_id)
    if url is None:
        return True
    raw = json.dumps(body, sort_keys=True).encode()
    error = ""
    for attempt, delay in enumerate([0.0, *delays_s]):
        if delay:
            time.sleep(delay)
        request = urllib.request.Request(
            url,
            data=raw,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-Retarget-Signature": sign(secret, raw),
                "X-Retarget-Delivery": f"{deployment_id}:{body['release_id']}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as resp:
                if 200 <= resp.status < 300:
                    _record_callback(session_factory, deployment_id, "callback_ok", attempt + 1, "")
                    return True
                error = f"HTTP {resp.status}"
        except Exception as exc:  # the receiver's failure is data, not our crash
            error = f"{type(exc).__name__}: {exc}"
        log.warning(
            "callback for deployment %s failed (attempt %d): %s", deployment_id, attempt + 1, error
        )
    _record_callback(session_factory, deployment_id, "callback_failed", len(delays_s) + 1, error)
    return False


def _record_callback(
    session_factory: sessionmaker[Session],
    deployment_id: str,
    kind: str,
    attempts: int,
    error: str,
) -> None:
    with session_scope(session_factory) as session:
        dep = session.get(Deployment, deployment_id)
        if dep is None:
            return
        if kind == "callback_failed":
            dep.last_error = f"callback failed after {attempts} attempts: {error}"
        session.add(
            DeploymentEvent(
                deployment_id=deployment_id,
                kind=kind,
                release_id=dep.current_release_id,
                reason=f"{attempts} attempt(s){': ' + error if error else ''}",
            )
        )
