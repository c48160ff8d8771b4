"""Aliases and tags of models, as a model registry has them.

An alias (``champion``, ``staging``) names one version of a model, per dataset and
model name: ``DATASET/NAME@champion``. Setting it again moves it; a move is one
transaction under the name's lock, and every set, move and delete is kept as an event
(who, from which version to which). A deployment may follow an alias
(``service.deployments.follow``): the caller records its re-target in the same
transaction as the move.

Tags are free key/value strings on one version (a label is a key with an empty
value), at most ``MAX_TAGS`` a model.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.errors import Conflict, InvalidInput, NotFound
from service.registry.models import Model, ModelAlias, ModelAliasEvent, ModelTag
from service.registry.names import LATEST

#: a letter first (so never a version number), then letters, digits, '_', '-', '.'
ALIAS_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
TAG_KEY_PATTERN = re.compile(r"^[^\x00-\x1f\x7f=]{1,100}$")
MAX_TAGS = 50
MAX_TAG_VALUE = 1000
#: events shown with a model name's aliases
HISTORY_SHOWN = 100


def check_alias(alias: str) -> str:
    """``alias`` if it may name a version; ``InvalidInput`` saying why not."""
    if not ALIAS_PATTERN.match(alias):
        raise InvalidInput(
            f"alias {alias!r}: a letter, then up to 63 letters, digits, '_', '-' or '.'"
        )
    if alias == LATEST:
        raise InvalidInput("alias 'latest' is reserved: it always names the highest version")
    return alias


def name_lock_key(dataset_id: str, name: str) -> str:
    """The key of the lock that orders alias moves of one model name."""
    return f"alias\x00{dataset_id}\x00{name}"


def set_alias(
    *, session: Session, model: Model, alias: str, key_name: str | None
) -> tuple[ModelAlias, ModelAliasEvent]:
    """Point ``alias`` of the model's name at this version (creating or moving it),
    and record the event. Call it under the name's lock (``name_lock_key``)."""
    check_alias(alias)
    row = session.scalar(
        select(ModelAlias).where(
            ModelAlias.dataset_id == model.dataset_id,
            ModelAlias.name == model.name,
            ModelAlias.alias == alias,
        )
    )
    previous = session.get(Model, row.model_id) if row is not None else None
    now = datetime.now(UTC)
    if row is None:
        row = ModelAlias(
            dataset_id=model.dataset_id, name=model.name, alias=alias, model_id=model.id
        )
        session.add(row)
    row.model_id, row.updated_at = model.id, now
    event = ModelAliasEvent(
        dataset_id=model.dataset_id,
        name=model.name,
        alias=alias,
        model_id=model.id,
        version=model.version,
        previous_model_id=previous.id if previous is not None else None,
        previous_version=previous.version if previous is not None else None,
        key_name=key_name,
        created_at=now,
    )
    session.add(event)
    session.flush()
    return row, event


def get_alias(*, session: Session, dataset_id: str, name: str, alias: str) -> ModelAlias:
    row = session.scalar(
        select(ModelAlias).where(
            ModelAlias.dataset_id == dataset_id,
            ModelAlias.name == name,
            ModelAlias.alias == alias,
        )
    )
    if row is None:
        raise NotFound(f"model {name!r} has no alias {alias!r}")
    return row


def delete_alias(
    *, session: Session, dataset_id: str, name: str, alias: str, key_name: str | None
) -> ModelAliasEvent:
    """Remove the alias and record it; ``NotFound`` if there is none."""
    row = get_alias(session=session, dataset_id=dataset_id, name=name, alias=alias)
    previous = session.get(Model, row.model_id)
    session.delete(row)
    event = ModelAliasEvent(
        dataset_id=dataset_id,
        name=name,
        alias=alias,
        previous_model_id=row.model_id,
        previous_version=previous.version if previous is not None else None,
        key_name=key_name,
    )
    session.add(event)
    session.flush()
    return event


def aliases_of(*, session: Session, dataset_id: str, name: str) -> list[ModelAlias]:
    return list(
        session.scalars(
            select(ModelAlias)
            .where(ModelAlias.dataset_id == dataset_id, ModelAlias.name == name)
            .order_by(ModelAlias.alias)
        )
    )


def history(
    *, session: Session, dataset_id: str, name: str, limit: int = HISTORY_SHOWN
) -> list[ModelAliasEvent]:
    """The name's alias events, newest first."""
    return list(
        session.scalars(
            select(ModelAliasEvent)
            .where(ModelAliasEvent.dataset_id == dataset_id, ModelAliasEvent.name == name)
            .order_by(ModelAliasEvent.created_at.desc(), ModelAliasEvent.id)
            .limit(limit)
        )
    )


def labels(
    *, session: Session, model_ids: Iterable[str]
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each model's aliases and tags, in two queries (a page of models at once)."""
    ids = list(model_ids)
    out: dict[str, tuple[list[str], dict[str, str]]] = {m: ([], {}) for m in ids}
    if not ids:
        return out
    names: defaultdict[str, list[str]] = defaultdict(list)
    for model_id, alias in session.execute(
        select(ModelAlias.model_id, ModelAlias.alias)
        .where(ModelAlias.model_id.in_(ids))
        .order_by(ModelAlias.alias)
    ):
        names[model_id].append(alias)
    for model_id, key, value in session.execute(
        select(ModelTag.model_id, ModelTag.key, ModelTag.value)
        .where(ModelTag.model_id.in_(ids))
        .order_by(ModelTag.key)
    ):
        out[model_id][1][key] = value
    for model_id, found in names.items():
        out[model_id][0].extend(found)
    return out


def set_tags(
    *, session: Session, model: Model, tags: dict[str, str], remove: Iterable[str] = ()
) -> dict[str, str]:
    """Set ``tags`` (replacing values) and remove the keys in ``remove``, at once; the
    model's tags after. ``InvalidInput`` past ``MAX_TAGS`` or for a malformed tag."""
    gone = set(remove)
    both = gone & set(tags)
    if both:
        raise InvalidInput(f"tag {sorted(both)[0]!r} is both set and removed")
    for key, value in tags.items():
        if not TAG_KEY_PATTERN.match(key):
            raise InvalidInput(
                f"tag key {key!r}: 1 to 100 characters, no control characters and no '='"
            )
        if len(value) > MAX_TAG_VALUE or "\x00" in value:
            raise InvalidInput(f"tag {key!r}: a value is at most {MAX_TAG_VALUE} characters")
    query = select(ModelTag).where(ModelTag.model_id == model.id)
    existing = {t.key: t for t in session.scalars(query)}
    after = (set(existing) - gone) | set(tags)
    if len(after) > MAX_TAGS:
        raise InvalidInput(f"a model has at most {MAX_TAGS} tags (this would make {len(after)})")
    # nothing is written before every check has passed
    if gone:
        session.execute(
            delete(ModelTag).where(ModelTag.model_id == model.id, ModelTag.key.in_(gone))
        )
    now = datetime.now(UTC)
    for key, value in tags.items():
        row = existing.get(key)
        if row is None:
            session.add(ModelTag(model_id=model.id, key=key, value=value, updated_at=now))
        else:
            row.value, row.updated_at = value, now
    try:
        session.flush()
    except IntegrityError as exc:  # another request added the same key meanwhile
        session.rollback()
        raise Conflict("the model's tags changed meanwhile; send the change again") from exc
    return labels(session=session, model_ids=[model.id])[model.id][1]
