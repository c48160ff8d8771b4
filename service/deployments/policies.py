"""Deployments: a name serving the current release of a dataset under a policy.

A policy change plans and releases anew and points the deployment at the new
release; if the new policy cannot be met, the deployment keeps serving the
previous release and the failed change is recorded with its reason. Policies are
ordered by ``policy_version``: a change older than the current policy is refused
(409), so a delayed or captured webhook cannot roll a deployment back. The
announcement of a new release (a callback) is an outbox item written in the same
transaction as the release (``service.deployments.notifications`` sends it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from service.accounting.planning import PlanRequestSpec
from service.deployments import follow, outbox
from service.deployments.callbacks import AllowList, check_callback_url
from service.errors import (
    Busy,
    Conflict,
    InvalidInput,
    NotFound,
    ProfilesPending,
    RetargetError,
    StorageError,
)
from service.plans.tasks import Compute, in_thread
from service.profiles.source import ProfileSource
from service.registry import names, repository
from service.registry.blobs import BlobStore
from service.registry.db import session_scope
from service.registry.models import Deployment, DeploymentEvent, Release
from service.releases import retarget as release_service
from service.releases.revisions import commit_of

log = logging.getLogger(__name__)


def get_deployment(*, session: Session, name: str) -> Deployment:
    row = session.scalar(select(Deployment).where(Deployment.name == name))
    if row is None:
        recent = select(Deployment.name).order_by(Deployment.created_at.desc())
        known = list(session.scalars(recent.limit(names.SUGGESTION_SCAN)))
        suggestions = names.close_names(name, known)
        hint = f"; did you mean {' or '.join(map(repr, suggestions))}?" if suggestions else ""
        raise NotFound(f"no deployment named {name!r}{hint}", suggestions=suggestions)
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
        # a following deployment names its one candidate: refused, never dropped
        strict=dep.follows_name is not None,
    )


def _same_settings(dep: Deployment, **wanted: object) -> None:
    """``exist_ok``: the deployment already there must be the one asked for (409 naming
    the first difference). Its policy is not compared: policy changes move it."""
    for field, value in wanted.items():
        if getattr(dep, field) != value:
            raise Conflict(
                f"a deployment named {dep.name!r} already exists with another {field} "
                f"({getattr(dep, field)!r}, not {value!r})",
                field=field,
            )


def create_deployment(
    *,
    session: Session,
    profiles: ProfileSource,
    blobs: BlobStore,
    name: str,
    dataset_id: str,
    epsilon: float,
    delta: float,
    method: str,
    accountant: str,
    callback_url: str | None,
    callback_secret: str | None,
    callback_allow: AllowList,
    version: int,
    compute: Compute = in_thread,
    follows: tuple[str, str] | None = None,
    exist_ok: bool = False,
) -> tuple[Deployment, Release | None, str | None]:
    """A new deployment, its first release and (with a callback) the outbox item that
    announces it; nothing is stored if the release fails. A callback URL naming an
    internal host is refused (422) unless the operator's allow-list admits it.

    ``follows`` (model name, alias): the deployment serves that alias's version alone
    (``service.deployments.follow``), by random selection over that one model.
    ``exist_ok``: a deployment of this name with the same dataset, method, accountant,
    callback and alias is returned as it is (release None: nothing new was made)."""
    if follows is not None:
        if method not in ("rs", "auto"):
            raise InvalidInput(
                f"a deployment that follows an alias serves that one model: method {method!r} "
                "does not apply (leave it out, or 'rs')"
            )
        method = "rs"
    existing = session.scalar(select(Deployment).where(Deployment.name == name))
    if existing is not None:
        if not exist_ok:
            raise Conflict(f"a deployment named {name!r} already exists")
        _same_settings(
            existing,
            dataset_id=dataset_id,
            method=method,
            accountant=accountant,
            callback_url=callback_url,
            follows_name=follows[0] if follows else None,
            follows_alias=follows[1] if follows else None,
        )
        return existing, None, None
    if callback_url is not None:
        if not callback_secret:
            raise InvalidInput(
                "callback_url needs RETARGET_CALLBACK_SECRET on the server "
                "(notifications are signed)"
            )
        check_callback_url(callback_url, callback_allow)
    repository.get_dataset(session=session, dataset_id=dataset_id)
    dep = Deployment(
        name=name,
        dataset_id=dataset_id,
        epsilon=epsilon,
        delta=delta,
        method=method,
        accountant=accountant,
        callback_url=callback_url,
        policy_version=version,
        follows_name=follows[0] if follows else None,
        follows_alias=follows[1] if follows else None,
    )
    release, _ = release_service.retarget(
        session=session,
        profiles=profiles,
        blobs=blobs,
        dataset_id=dataset_id,
        model_ids=follow.followed_model_ids(session=session, dep=dep),
        spec=_spec(dep, epsilon, delta),
        deployment=name,
        compute=compute,
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
    return dep, release, _announce(session, dep, release) if callback_url else None


@dataclass(frozen=True)
class PolicyChange:
    deployment_id: str
    release_id: str
    #: the outbox item announcing the release (None without a callback)
    notify_item: str | None


#: errors that say "not now" rather than "no": the change is retried, not recorded as failed
TRANSIENT = (Busy, StorageError, ProfilesPending)


def check_order(dep: Deployment, version: int) -> None:
    """Refuse (409) a policy older than the deployment's current one."""
    if version < dep.policy_version:
        raise Conflict(
            f"policy version {version} is older than deployment {dep.name!r}'s current "
            f"policy (version {dep.policy_version}); refused so a policy cannot be rolled back",
            current_version=dep.policy_version,
        )


def change_policy(
    *,
    session_factory: sessionmaker[Session],
    profiles: ProfileSource,
    blobs: BlobStore,
    name: str,
    epsilon: float | None,
    delta: float | None,
    reason: str | None,
    source: str | None,
    version: int,
    refuse_older: bool,
    notify: bool,
    item: tuple[str, int] | None = None,
    compute: Compute = in_thread,
) -> PolicyChange:
    """Re-target a deployment at policy ``version``.

    ``refuse_older``: a version older than the current one is a ``Conflict`` (webhooks);
    otherwise (an operator's PUT) the version only moves forward. ``item`` (outbox id,
    claimed attempt): the item is finished in the transaction that applies (or refuses)
    the change, so however often the work runs it happens once (``outbox.Superseded``).
    On a domain error the deployment keeps its release, the failure is recorded in its
    history, and the error is raised; transient errors (busy, storage, pending
    profiles) are raised without a record, to be retried.

    ``epsilon`` and ``delta`` None: the deployment's current policy, planned again (a
    following deployment's alias moved: ``service.deployments.follow``).
    """
    with session_scope(session_factory) as session:
        get_deployment(session=session, name=name)  # an unknown name is a plain 404
    try:
        with session_scope(session_factory) as session:
            dep = get_deployment(session=session, name=name)
            if refuse_older:
                check_order(dep, version)
            if epsilon is None or delta is None:
                epsilon, delta = dep.epsilon, dep.delta
            release, _ = release_service.retarget(
                session=session,
                profiles=profiles,
                blobs=blobs,
                dataset_id=dep.dataset_id,
                model_ids=follow.followed_model_ids(session=session, dep=dep),
                spec=_spec(dep, epsilon, delta),
                deployment=name,
                compute=compute,
            )
            dep.epsilon, dep.delta = epsilon, delta
            dep.policy_version = max(dep.policy_version, version)
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
            announce = _announce(session, dep, release) if notify and dep.callback_url else None
            if item is not None:
                outbox.finish(
                    session,
                    *item,
                    "done",
                    {"status": "changed", "deployment": name, "release_id": release.id},
                )
            return PolicyChange(dep.id, release.id, announce)
    except TRANSIENT:
        raise
    except RetargetError as exc:
        with session_scope(session_factory) as session:
            if item is not None:
                outbox.finish(
                    session,
                    *item,
                    "done",
                    {"status": "refused", "deployment": name, "reason": exc.detail},
                )
            dep = get_deployment(session=session, name=name)
            dep.last_error = exc.detail
            dep.updated_at = datetime.now(UTC)
            session.add(
                DeploymentEvent(
                    deployment_id=dep.id,
                    kind="policy_failed",
                    epsilon=dep.epsilon if epsilon is None else epsilon,
                    delta=dep.delta if delta is None else delta,
                    release_id=dep.current_release_id,
                    reason=f"{reason + ': ' if reason else ''}{exc.detail}",
                    source=source,
                )
            )
        raise


def notification(session: Session, dep: Deployment, release: Release) -> dict[str, Any]:
    """What a callback receives about a release of ``dep``."""
    return {
        "deployment": dep.name,
        "release_id": release.id,
        "sha256": release.sha256,
        "epsilon": dep.epsilon,
        "delta": dep.delta,
        "model_url": f"/v1/deployments/{dep.name}/model",
        "kind": release.kind,
        "archive_url": f"/v1/deployments/{dep.name}/archive",
        # the Hub-compatible endpoint (/hf): this release pinned, whatever main becomes
        "revision": release.id,
        "commit": commit_of(release.id),
    }


def _announce(session: Session, dep: Deployment, release: Release) -> str:
    """The outbox item that will tell ``dep``'s callback about ``release``."""
    body = notification(session, dep, release)
    return outbox.add(session, "notify", {"deployment_id": dep.id, "body": body}).id
