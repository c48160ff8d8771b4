"""Deployments that follow an alias: ``--follows digits/sigma1.2@champion``.

Such a deployment serves one model, the version the alias names, so each of its
releases is a release of that model alone and is charged as one: the plan is random
selection over that single candidate (weight 1: the model itself, under its own
guarantee, Theorems 5.1/5.2 with one model), checked against the deployment's policy
and the dataset's cap like any release (``service.releases.retarget``), and the
ledger counts the model as exposed. A model whose own epsilon exceeds the policy is
refused (422, with ``min_epsilon``), never served.

Moving the alias re-targets every deployment that follows it through the policy-change
path (``policies.change_policy``, at the deployment's current policy): an outbox item
(kind ``follow``) is written in the move's transaction, so a move and its re-targets
are stored together or not at all. A re-target the policy or the cap refuses leaves
the deployment on its current release with the failure in its history and
``last_error``, as a refused policy change does; the alias has moved all the same.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.deployments import outbox
from service.errors import Conflict, InvalidInput
from service.registry import aliases as alias_rows
from service.registry import names
from service.registry.models import Dataset, Deployment

#: the outbox kind of a re-target after an alias move
KIND = "follow"


def parse_follows(*, session: Session, dataset: Dataset, follows: str) -> tuple[str, str]:
    """``[DATASET/]NAME@ALIAS`` of ``dataset`` as (name, alias); the alias must exist
    and name a version (``NotFound`` with suggestions otherwise)."""
    ref = names.parse_model_ref(follows)
    if ref.dataset is not None and names.dataset_id(session=session, ref=ref.dataset) != (
        dataset.id
    ):
        raise InvalidInput(
            f"follows {follows!r} names a model of another dataset than the deployment's "
            f"({dataset.name!r})"
        )
    if "@" not in follows or ref.selector == names.LATEST or names.is_version(ref.selector):
        raise InvalidInput(
            f"follows {follows!r}: a deployment follows an alias (NAME@ALIAS, e.g. "
            "sigma1.2@champion); to serve a fixed version, set an alias on it"
        )
    alias_rows.check_alias(ref.selector)
    names.model_in(session=session, dataset=dataset, ref=ref)  # it exists now
    return ref.name, ref.selector


def followed_model_ids(*, session: Session, dep: Deployment) -> list[str] | None:
    """The one candidate of a following deployment (the alias's version now); None for
    a deployment that plans over its dataset's models."""
    if dep.follows_name is None or dep.follows_alias is None:
        return None
    row = alias_rows.get_alias(
        session=session,
        dataset_id=dep.dataset_id,
        name=dep.follows_name,
        alias=dep.follows_alias,
    )
    return [row.model_id]


def follows_text(session: Session, dep: Deployment) -> str | None:
    """``DATASET/NAME@ALIAS`` of a following deployment, for people."""
    if dep.follows_name is None:
        return None
    dataset = session.get(Dataset, dep.dataset_id)
    prefix = f"{dataset.name}/" if dataset is not None else ""
    return f"{prefix}{dep.follows_name}@{dep.follows_alias}"


def followers(*, session: Session, dataset_id: str, name: str, alias: str) -> list[Deployment]:
    return list(
        session.scalars(
            select(Deployment)
            .where(
                Deployment.dataset_id == dataset_id,
                Deployment.follows_name == name,
                Deployment.follows_alias == alias,
            )
            .order_by(Deployment.name)
        )
    )


def queue_retargets(
    *, session: Session, dataset_id: str, name: str, alias: str, reason: str
) -> list[tuple[str, str]]:
    """In the move's transaction: one ``follow`` outbox item per deployment following
    the alias; [(deployment name, item id)] to dispatch after the commit."""
    return [
        (
            dep.name,
            outbox.add(
                session, KIND, {"deployment": dep.name, "reason": reason, "source": "alias"}
            ).id,
        )
        for dep in followers(session=session, dataset_id=dataset_id, name=name, alias=alias)
    ]


def refuse_delete_if_followed(*, session: Session, dataset_id: str, name: str, alias: str) -> None:
    """An alias a deployment follows is moved, not deleted (409 naming them)."""
    deps = followers(session=session, dataset_id=dataset_id, name=name, alias=alias)
    if deps:
        shown = ", ".join(repr(d.name) for d in deps[:10])
        raise Conflict(
            f"alias {alias!r} of {name!r} is followed by deployment(s) {shown}: move it to "
            "another version instead of deleting it",
            deployments=[d.name for d in deps],
        )
