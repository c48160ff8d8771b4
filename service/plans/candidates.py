"""A plan's candidates: the dataset's models (or the named ones) with their profiles.

A dataset's models that are retired, or copies of another model's bytes, are no
candidates; a request naming one is refused. Of a whole dataset, a model whose stored
mechanism no longer parses or whose profile failed is left out with a note, so one bad
registration never breaks the plans of the others (``usable_candidates``).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.lc.accountant import lc_input
from service.accounting.mechanisms import Mechanism, parse_mechanism
from service.accounting.planning import Candidate
from service.accounting.profiles.profile import PrivacyProfile
from service.errors import InvalidInput, NotFound, ProfileFailed, Unsupported
from service.profiles.source import ProfileSource, profiles_or_failures
from service.registry import repository
from service.registry.model_rows import metric_sources
from service.registry.models import Model


def candidate_rows(
    *, session: Session, dataset_id: str, model_ids: list[str] | None
) -> list[Model]:
    """The dataset's models that are not retired (or the named ones, which must all
    belong to it and none be retired), in order."""
    repository.get_dataset(session=session, dataset_id=dataset_id)
    if model_ids:
        rows = list(session.scalars(select(Model).where(Model.id.in_(model_ids))))
        found = {m.id for m in rows}
        missing = [m for m in model_ids if m not in found]
        if missing:
            raise NotFound(f"no model with id {missing[0]!r}", missing=missing)
        foreign = [m.id for m in rows if m.dataset_id != dataset_id]
        if foreign:
            raise InvalidInput(
                f"model {foreign[0]!r} belongs to another dataset: models trained on "
                "different data cannot be merged or selected among for this dataset",
                foreign=foreign,
            )
        retired = [m for m in rows if m.retired_at is not None]
        if retired:
            raise InvalidInput(
                f"model {retired[0].id!r} is retired ({retired[0].retired_reason}): it is no "
                "candidate of any plan",
                retired=[m.id for m in retired],
            )
        copies = [m for m in rows if m.duplicate_of is not None]
        if copies:
            raise InvalidInput(
                f"model {copies[0].id!r} is a copy of model {copies[0].duplicate_of!r} (the same "
                "bytes, registered twice): it is not an independent run; name the original",
                copies=[m.id for m in copies],
            )
        order = {m: i for i, m in enumerate(model_ids)}
        rows.sort(key=lambda m: order[m.id])
        return rows
    # copies of another model's bytes are left out: one run, not two
    return list(
        session.scalars(
            select(Model)
            .where(
                Model.dataset_id == dataset_id,
                Model.retired_at.is_(None),
                Model.duplicate_of.is_(None),
            )
            .order_by(Model.created_at)
        )
    )


def candidates_from(
    rows: list[Model], profiles: ProfileSource, *, for_lc: bool = False
) -> list[Candidate]:
    """Candidates with their profiles (``ProfilesPending`` while any is computed,
    ``ProfileFailed`` if one failed).

    ``for_lc``: also the profile of what LC composes jointly for each model (its run
    before the last step), through the same cache and workers as every profile."""
    candidates, left_out = _load(rows, profiles, for_lc=for_lc, strict=True)
    assert not left_out
    return candidates


def usable_candidates(
    rows: list[Model], profiles: ProfileSource, *, for_lc: bool = False
) -> tuple[list[Candidate], list[str]]:
    """The candidates among ``rows`` that can be planned with, and a note for each model
    left out: one whose stored mechanism no longer parses or whose profile failed (over
    its budget, or an error). So one bad registration never breaks the plans of the
    other models of its dataset. ``ProfilesPending`` while any profile is computed."""
    return _load(rows, profiles, for_lc=for_lc, strict=False)


def _load(
    rows: list[Model], profiles: ProfileSource, *, for_lc: bool, strict: bool
) -> tuple[list[Candidate], list[str]]:
    left_out: list[str] = []
    parsed: list[tuple[Model, Mechanism]] = []
    for row in rows:
        try:
            parsed.append((row, parse_mechanism(row.mechanism)))
        except ValueError as exc:  # a record stored under older, looser rules
            if strict:
                raise InvalidInput(
                    f"model {row.id!r}'s stored mechanism is invalid: {exc}"
                ) from exc
            left_out.append(f"model {_label(row)} left out: its stored mechanism is invalid")
    items = [(f"model {row.id!r}", m) for row, m in parsed]
    prefixes: dict[int, int] = {}
    if for_lc:
        for i, (row, m) in enumerate(parsed):
            released = lc_released(m)
            if released is not None:
                prefixes[i] = len(items)
                items.append((f"model {row.id!r} before its last step", released))
    found = profiles_or_failures(profiles, items)
    out = []
    failures: list[ProfileFailed] = []
    for i, (row, mechanism) in enumerate(parsed):
        own = found[i]
        before = found[prefixes[i]] if i in prefixes else None
        failed = next((f for f in (own, before) if isinstance(f, ProfileFailed)), None)
        if failed is not None:
            if strict:
                raise failed
            failures.append(failed)
            left_out.append(f"model {_label(row)} left out: {failed.detail}")
            continue
        assert isinstance(own, PrivacyProfile)
        out.append(
            Candidate(
                id=row.id,
                mechanism=mechanism,
                profile=own,
                metrics={k: float(v) for k, v in (row.metrics or {}).items()},
                run_id=row.lineage_run_id,
                step=row.lineage_step,
                lineage_verified=bool(row.lineage_verified),
                signature_hash=row.signature_hash,
                signature=row.signature,
                released_profile=before if isinstance(before, PrivacyProfile) else None,
                name=row.name,
                metric_sources=metric_sources(row),
                metric_sensitivities={
                    k: float(v["sensitivity"])
                    for k, v in (row.metric_declarations or {}).items()
                    if v.get("sensitivity") is not None
                },
            )
        )
    if not out and failures:  # nothing usable: the first cause is the answer
        raise failures[0]
    return out, left_out


def _label(row: Model) -> str:
    return f"{row.name!r} ({row.id})"


def lc_released(mechanism: Mechanism) -> Mechanism | None:
    """The mechanism LC composes jointly for a model (its run before the last step), when
    that is not the model's own mechanism."""
    try:
        inp = lc_input(mechanism)
    except Unsupported:
        return None
    return inp.released if inp.final is not None else None


def load_candidates(
    *,
    session: Session,
    profiles: ProfileSource,
    dataset_id: str,
    model_ids: list[str] | None,
    for_lc: bool = False,
) -> list[Candidate]:
    """The dataset's models (or the named ones, which must all belong to it) with profiles."""
    rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=model_ids)
    return candidates_from(rows, profiles, for_lc=for_lc)


def chosen_candidates(
    rows: list[Model], profiles: ProfileSource, model_ids: list[str] | None, *, for_lc: bool
) -> tuple[list[Candidate], list[str]]:
    """The candidates of a request: every model it names must be usable (an error
    otherwise); of a whole dataset, the usable ones, with a note for each left out."""
    if model_ids:
        return candidates_from(rows, profiles, for_lc=for_lc), []
    return usable_candidates(rows, profiles, for_lc=for_lc)
