"""Plans from the registry: load candidates and their profiles, then plan.

Plans need every candidate's profile. Missing ones are queued (embedded default:
computed right away) and the plan answers 202 until they are cached. The plan
itself (``make_plan``) and a guarantee are pure functions of the candidates: they
run through a ``compute`` (``service.plans.tasks.Compute``), in the app a plan process
within a wall-clock budget and a memory limit (``PlanJobs.compute``). A plan
scored on the validation split is computed here: it reads blobs and runs the
models.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from safetensors.torch import load_file
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.lc.accountant import lc_input
from service.accounting.mechanisms import Mechanism, canonical_json, parse_mechanism
from service.accounting.planning import Candidate, Evaluate, Plan, PlanRequestSpec, make_plan
from service.accounting.planning.guarantees import Guarantee
from service.accounting.profiles.profile import PrivacyProfile
from service.errors import InvalidInput, NotFound, ProfileFailed, StorageError, Unsupported
from service.jobs.lru import Lru
from service.merging.architecture import Architecture
from service.merging.validation import Scorer, read_split
from service.plans.tasks import Compute, in_thread
from service.profiles.source import ProfileSource, profiles_or_failures
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.models import Dataset, Model


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
        order = {m: i for i, m in enumerate(model_ids)}
        rows.sort(key=lambda m: order[m.id])
        return rows
    return list(
        session.scalars(
            select(Model)
            .where(Model.dataset_id == dataset_id, Model.retired_at.is_(None))
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
    for i, (row, mechanism) in enumerate(parsed):
        own = found[i]
        before = found[prefixes[i]] if i in prefixes else None
        failed = next((f for f in (own, before) if isinstance(f, ProfileFailed)), None)
        if failed is not None:
            if strict:
                raise failed
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
                released_profile=before if isinstance(before, PrivacyProfile) else None,
            )
        )
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


def uses_lc(spec: PlanRequestSpec) -> bool:
    return spec.method in ("lc", "auto") and spec.objective in (None, "noise")


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


def validation_evaluator(
    *, blobs: BlobStore, dataset: Dataset, spec: PlanRequestSpec, rows: list[Model]
) -> Evaluate | None:
    """Accuracy of merged weights of the candidate ``rows`` on the dataset's public
    validation split, for objective 'validation'; None when the request does not ask
    for it or there is no split. The split and each model are loaded on first use."""
    if spec.objective != "validation" or dataset.validation_sha256 is None:
        return None
    split_path = blobs.local_path(dataset.validation_sha256)
    if not split_path.is_file():
        raise StorageError("the dataset's validation split is missing from the store")
    scorers: dict[str, Scorer] = {}
    by_id = {m.id: m for m in rows}

    def load(model_id: str) -> dict:
        path = blobs.local_path(by_id[model_id].sha256)
        if not path.is_file():
            raise StorageError(f"the weights of model {model_id!r} are missing")
        return load_file(str(path))

    def evaluate(weights: dict[str, float]) -> float:
        declared = {json.dumps(by_id[m].architecture, sort_keys=True) for m in weights}
        if any(by_id[m].architecture is None for m in weights):
            missing = sorted(m for m in weights if by_id[m].architecture is None)
            raise Unsupported(
                f"objective 'validation' needs every model to declare its architecture; "
                f"{missing[0]!r} does not"
            )
        if len(declared) != 1:
            raise Unsupported("objective 'validation': the models declare different architectures")
        key = declared.pop()
        if key not in scorers:
            scorers[key] = Scorer(
                Architecture.model_validate_json(key), read_split(split_path), load
            )
        return scorers[key].score(weights)

    return evaluate


def plan_for(
    *,
    session: Session,
    profiles: ProfileSource,
    blobs: BlobStore,
    dataset_id: str,
    model_ids: list[str] | None,
    spec: PlanRequestSpec,
    compute: Compute = in_thread,
) -> Plan:
    dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
    if spec.objective == "metric" and spec.metric is None and dataset.metric:
        spec = PlanRequestSpec(**{**spec.__dict__, "metric": dataset.metric})
    rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=model_ids)
    for_lc = uses_lc(spec) and spec.objective != "validation"
    candidates, left_out = chosen_candidates(rows, profiles, model_ids, for_lc=for_lc)
    rows = [r for r in rows if r.id in {c.id for c in candidates}]
    if spec.objective == "validation":  # scores blobs; not worth caching
        evaluate = validation_evaluator(blobs=blobs, dataset=dataset, spec=spec, rows=rows)
        plan = make_plan(candidates, spec, evaluate)
    else:
        key = plan_cache_key(spec, rows)
        cached = PLAN_CACHE.get(key)
        if cached is None:
            cached = compute("plan", candidates, spec)
            PLAN_CACHE.put(key, cached)
        plan = copy.deepcopy(cached)
    plan.notes.extend(left_out)
    return plan


def chosen_candidates(
    rows: list[Model], profiles: ProfileSource, model_ids: list[str] | None, *, for_lc: bool
) -> tuple[list[Candidate], list[str]]:
    """The candidates of a request: every model it names must be usable (an error
    otherwise); of a whole dataset, the usable ones, with a note for each left out."""
    if model_ids:
        return candidates_from(rows, profiles, for_lc=for_lc), []
    return usable_candidates(rows, profiles, for_lc=for_lc)


def plan_cache_key(spec: PlanRequestSpec, rows: list[Model]) -> str:
    """Everything a plan depends on: the request and each candidate's mechanism, metrics,
    lineage and signature (a plan is a pure function of these, and of the code)."""
    payload = {"spec": spec.__dict__, "candidates": _candidates_key(rows)}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def _candidates_key(rows: list[Model]) -> list[list]:
    return [
        [
            m.id,
            m.mechanism_hash,
            m.metrics,
            m.lineage_run_id,
            m.lineage_step,
            bool(m.lineage_verified),
            m.signature_hash,
        ]
        for m in rows
    ]


#: Recent plans in this process, by ``plan_cache_key``.
PLAN_CACHE: Lru[str, Plan] = Lru(1024)


def task_cache_key(task: str, dataset_id: str, args: list[Any], rows: list[Model]) -> str:
    """The canonical key of a plan-process ``task`` (``service.plans.tasks.TASKS``: the explorer's
    plans at a target, the frontier) over a dataset's models: the task, the dataset, the
    task's arguments (target, delta, the models' names) and each model's mechanism hash
    (which, with this process's code and discretization, fixes its profile: its profile
    key), metrics, lineage and signature. The answer is a pure function of these."""
    payload = {
        "task": task,
        "dataset": dataset_id,
        "args": args,
        "candidates": _candidates_key(rows),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


#: Recent answers of the dashboard's tasks in this process, by ``task_cache_key``.
TASK_CACHE: Lru[str, Any] = Lru(256)


def guarantee_for(
    *,
    session: Session,
    profiles: ProfileSource,
    dataset_id: str,
    weights: dict[str, float],
    method: str,
    delta: float,
    accountants: tuple[str, ...],
    compute: Compute = in_thread,
) -> Guarantee:
    candidates = load_candidates(
        session=session,
        profiles=profiles,
        dataset_id=dataset_id,
        model_ids=list(weights),
        for_lc=method == "lc",
    )
    result: Guarantee = compute(
        "guarantee", candidates, [weights[c.id] for c in candidates], method, delta, accountants
    )
    return result
