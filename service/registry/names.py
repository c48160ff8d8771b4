"""Names: datasets and models found by name as well as by id, and close names
suggested when a name is unknown.

A dataset is named by its id or by its name (names are unique). A model is named by
its id, by ``NAME[@SELECTOR]`` within a dataset, or by ``DATASET/NAME[@SELECTOR]``;
the selector is a version number, ``latest`` (the highest version, the default) or an
alias (``service.registry.aliases``). Dataset names cannot hold ``/`` and new model
names cannot hold ``@``, so a reference splits one way only; a model named with an
``@`` before that rule is still found when no alias or version matches and the whole
text is its name.

Every lookup reads a bounded number of rows: suggestions compare the unknown name
with at most ``SUGGESTION_SCAN`` names (the most recent), plus any name equal to it
but for case.
"""

from __future__ import annotations

import difflib
import uuid
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.errors import InvalidInput, NotFound
from service.registry.models import Dataset, Model, ModelAlias

#: how many names an unknown name is compared with to suggest close ones, how many
#: characters of each, and how many of the closest by shared character pairs go to
#: difflib (``close_names``)
SUGGESTION_SCAN = 1000
COMPARED_CHARS = 64
SHORTLIST = 20
#: how many versions an error message lists
VERSIONS_SHOWN = 20
LATEST = "latest"
#: versions are INTEGER columns
MAX_VERSION = 2**31 - 1


@dataclass(frozen=True)
class ModelRef:
    """``DATASET/NAME@SELECTOR`` taken apart (``dataset`` None: not given)."""

    dataset: str | None
    name: str
    selector: str

    def text(self, dataset_name: str | None = None) -> str:
        prefix = dataset_name or self.dataset
        return f"{prefix + '/' if prefix else ''}{self.name}@{self.selector}"


def version_of(selector: str) -> int | None:
    """The version a selector names (ASCII digits, at most 2^31 - 1), or None."""
    if not (selector.isascii() and selector.isdigit()) or len(selector) > 10:
        return None
    version = int(selector)
    return version if version <= MAX_VERSION else None


def is_version(selector: str) -> bool:
    """Whether a selector is a version number rather than an alias or ``latest``."""
    return selector.isascii() and selector.isdigit()


def looks_like_id(value: str) -> bool:
    """Whether ``value`` has the shape of the ids the registry makes (a UUID)."""
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return len(value) == 36


def parse_model_ref(ref: str) -> ModelRef:
    """Split ``[DATASET/]NAME[@SELECTOR]``; ``InvalidInput`` when a part is empty."""
    dataset, slash, rest = ref.partition("/")
    if not slash:
        dataset, rest = "", ref
    name, at, selector = rest.rpartition("@")
    if not at:
        name, selector = rest, LATEST
    if (slash and not dataset) or not name or not selector:
        raise InvalidInput(
            f"{ref!r} is not a model reference: use DATASET/NAME[@VERSION|@ALIAS] "
            "(or NAME[@VERSION|@ALIAS] where the dataset is given), or the model's id"
        )
    return ModelRef(dataset or None, name, selector)


def close_names(wanted: str, names: list[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``names`` close to ``wanted``: the same name in another case
    first, then difflib's ratio (at least 0.6). The work is bounded whatever the names:
    each is cut to ``COMPARED_CHARS`` characters, ranked by the character pairs it
    shares with ``wanted`` (linear), and only the best ``SHORTLIST`` go to difflib
    (quadratic in the length)."""
    folded = [x for x in names if x.lower() == wanted.lower() and x != wanted]
    heads: dict[str, str] = {}
    for name in names:
        heads.setdefault(name[:COMPARED_CHARS], name)
    head = wanted[:COMPARED_CHARS]
    pairs = _pairs(head)
    ranked = sorted(heads, key=lambda h: -_shared(pairs, _pairs(h)))[:SHORTLIST]
    close = difflib.get_close_matches(head, ranked, n=n, cutoff=0.6)
    return list(dict.fromkeys([*folded, *(heads[c] for c in close)]))[:n]


def _pairs(text: str) -> set[str]:
    low = text.lower()
    return {low[i : i + 2] for i in range(len(low) - 1)} or {low}


def _shared(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b)


def _did_you_mean(suggestions: list[str]) -> str:
    if not suggestions:
        return ""
    return "; did you mean " + " or ".join(repr(s) for s in suggestions) + "?"


def dataset_by_ref(*, session: Session, ref: str) -> Dataset:
    """The dataset with this id or name; ``NotFound`` suggesting close names."""
    found = session.get(Dataset, ref)
    if found is None:
        found = session.scalar(select(Dataset).where(Dataset.name == ref))
    if found is not None:
        return found
    recent = select(Dataset.name).order_by(Dataset.created_at.desc()).limit(SUGGESTION_SCAN)
    same_case = select(Dataset.name).where(func.lower(Dataset.name) == ref.lower()).limit(3)
    names = [*session.scalars(same_case), *session.scalars(recent)]
    suggestions = close_names(ref, names)
    raise NotFound(
        f"no dataset with id or name {ref!r}{_did_you_mean(suggestions)}",
        suggestions=suggestions,
    )


def dataset_id(*, session: Session, ref: str) -> str:
    """The id of the dataset with this id or name (``NotFound`` otherwise)."""
    return dataset_by_ref(session=session, ref=ref).id


def model_by_ref(*, session: Session, ref: str, dataset_id: str | None = None) -> Model:
    """The model a reference names: its id, ``DATASET/NAME[@SELECTOR]``, or, where
    ``dataset_id`` is given, ``NAME[@SELECTOR]`` in that dataset. An id or a
    ``DATASET/...`` may name a model of another dataset: the caller decides whether
    that is allowed."""
    if "/" not in ref:
        by_id = session.get(Model, ref)
        if by_id is not None:
            return by_id
        if dataset_id is None:
            raise NotFound(
                f"no model with id {ref!r}; name a model by DATASET/NAME[@VERSION|@ALIAS]"
            )
    parsed = parse_model_ref(ref)
    if parsed.dataset is not None:
        dataset = dataset_by_ref(session=session, ref=parsed.dataset)
    else:
        found = session.get(Dataset, dataset_id)
        if found is None:
            raise NotFound(f"no dataset with id {dataset_id!r}")
        dataset = found
    return model_in(session=session, dataset=dataset, ref=parsed)


def model_in(*, session: Session, dataset: Dataset, ref: ModelRef) -> Model:
    """``NAME@SELECTOR`` in ``dataset``; ``NotFound`` saying what there is instead."""
    where = (Model.dataset_id == dataset.id, Model.name == ref.name)
    if ref.selector == LATEST:
        found = session.scalar(select(Model).where(*where).order_by(Model.version.desc()).limit(1))
    elif is_version(ref.selector):
        version = version_of(ref.selector)
        found = (
            session.scalar(select(Model).where(*where, Model.version == version))
            if version is not None
            else None
        )
    else:
        model_id = session.scalar(
            select(ModelAlias.model_id).where(
                ModelAlias.dataset_id == dataset.id,
                ModelAlias.name == ref.name,
                ModelAlias.alias == ref.selector,
            )
        )
        found = session.get(Model, model_id) if model_id is not None else None
    if found is not None:
        return found
    whole = f"{ref.name}@{ref.selector}"
    legacy = session.scalar(
        select(Model)
        .where(Model.dataset_id == dataset.id, Model.name == whole)
        .order_by(Model.version.desc())
        .limit(1)
    )
    if legacy is not None:  # a name with '@' from before the rule
        return legacy
    raise _model_not_found(session, dataset, ref)


def _model_not_found(session: Session, dataset: Dataset, ref: ModelRef) -> NotFound:
    versions = list(
        session.scalars(
            select(Model.version)
            .where(Model.dataset_id == dataset.id, Model.name == ref.name)
            .order_by(Model.version)
            .limit(VERSIONS_SHOWN + 1)
        )
    )
    label = f"{dataset.name}/{ref.name}"
    if not versions:
        recent = (
            select(Model.name)
            .where(Model.dataset_id == dataset.id)
            .group_by(Model.name)
            .order_by(func.max(Model.created_at).desc())
            .limit(SUGGESTION_SCAN)
        )
        same_case = (
            select(Model.name)
            .where(Model.dataset_id == dataset.id, func.lower(Model.name) == ref.name.lower())
            .limit(3)
        )
        names = [*session.scalars(same_case), *session.scalars(recent)]
        suggestions = [f"{dataset.name}/{s}" for s in close_names(ref.name, names)]
        return NotFound(
            f"dataset {dataset.name!r} has no model named {ref.name!r}{_did_you_mean(suggestions)}",
            suggestions=suggestions,
        )
    shown = ", ".join(str(v) for v in versions[:VERSIONS_SHOWN])
    more = ", ..." if len(versions) > VERSIONS_SHOWN else ""
    if is_version(ref.selector):
        return NotFound(
            f"{label} has no version {ref.selector} (versions: {shown}{more})",
            suggestions=[f"{label}@{v}" for v in versions[-3:]],
        )
    aliases = list(
        session.scalars(
            select(ModelAlias.alias)
            .where(ModelAlias.dataset_id == dataset.id, ModelAlias.name == ref.name)
            .order_by(ModelAlias.alias)
            .limit(SUGGESTION_SCAN)
        )
    )
    suggestions = [f"{label}@{a}" for a in close_names(ref.selector, [*aliases, LATEST])]
    have = ", ".join(aliases[:VERSIONS_SHOWN]) or "none"
    return NotFound(
        f"{label} has no alias {ref.selector!r} (aliases: {have}; versions: {shown}{more})"
        f"{_did_you_mean(suggestions)}",
        suggestions=suggestions,
    )


def model_ids(*, session: Session, dataset_id: str, refs: list[str] | None) -> list[str] | None:
    """Candidate references (ids or names in ``dataset_id``) as ids, in order."""
    if refs is None:
        return None
    return [model_by_ref(session=session, ref=r, dataset_id=dataset_id).id for r in refs]
