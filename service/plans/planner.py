"""Plans from the registry: load candidates and their profiles (``candidates``), then plan.

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
from dataclasses import replace
from typing import Any

from safetensors.torch import load_file
from sqlalchemy.orm import Session

from service.accounting.mechanisms import canonical_json
from service.accounting.planning import (
    SPLIT_METRIC,
    Evaluate,
    Plan,
    PlanRequestSpec,
    default_objective,
    make_plan,
)
from service.accounting.planning.guarantees import Guarantee
from service.errors import StorageError, Unsupported
from service.jobs.lru import Lru
from service.merging.architecture import Architecture
from service.merging.validation import Scorer, read_split
from service.plans.candidates import (
    candidate_rows,
    candidates_from,
    chosen_candidates,
    lc_released,
    load_candidates,
    usable_candidates,
)
from service.plans.tasks import Compute, in_thread
from service.plans.uncertainty import with_uncertainty
from service.profiles.source import ProfileSource
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.model_rows import metric_sources
from service.registry.models import Dataset, Model


def uses_lc(spec: PlanRequestSpec) -> bool:
    return spec.method in ("lc", "auto") and spec.objective in (None, "noise", "signal")


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


def checkpoint_uncertainty_for(
    *, plan: Plan, spec: PlanRequestSpec, dataset: Dataset, rows: list[Model], blobs: BlobStore
) -> Plan:
    """A checkpoint plan with its uncertainty (``service.plans.uncertainty``): from the
    metric the checkpoints declare (the request's, else the dataset's), or, when the
    request names ``SPLIT_METRIC``, from each checkpoint's accuracy on the dataset's
    public validation split. Scoring reads the checkpoints: the plan then counts them as
    exposed (``plan.exposed``), which a release does anyway and a dry run is charged for
    (``reads_models``); the ledger charges checkpoints of one run as its latest one."""
    if plan.method not in ("checkpoint_average", "ensemble"):
        return plan
    if spec.metric != SPLIT_METRIC:
        return with_uncertainty(plan, rows, spec.metric or dataset.metric)
    if dataset.validation_sha256 is None:
        plan.notes.append(
            f"no uncertainty for {SPLIT_METRIC!r}: the dataset has no public validation split"
        )
        return plan
    evaluate = validation_evaluator(
        blobs=blobs, dataset=dataset, spec=replace(spec, objective="validation"), rows=rows
    )
    assert evaluate is not None  # a split, and objective 'validation'
    scores = {m: evaluate({m: 1.0}) for m in sorted(plan.weights)}
    plan.exposed = sorted(plan.weights)
    plan.notes.append(
        f"{SPLIT_METRIC}: each checkpoint scored on the dataset's public validation split; "
        "this reads the checkpoints, so the plan counts them as exposed (one run: charged as "
        "its latest checkpoint, the plan's own certificate)"
    )
    return with_uncertainty(plan, rows, SPLIT_METRIC, scores)


def with_dataset_metric(dataset: Dataset, spec: PlanRequestSpec) -> PlanRequestSpec:
    """Objective 'metric' without a metric: the dataset's (and its direction, if the
    request gives none)."""
    if spec.objective == "metric" and spec.metric is None and dataset.metric:
        goal = spec.metric_goal or dataset.metric_goal
        return replace(spec, metric=dataset.metric, metric_goal=goal)  # type: ignore[arg-type]
    return spec


def resolve_default(
    *, dataset: Dataset, rows: list[Model], spec: PlanRequestSpec, may_score: bool
) -> PlanRequestSpec:
    """The objective of a request that leaves it out, metrics first (docs/utility.md):

    1. the dataset's metric, when every candidate declares it 'prior' (fixed without
       these models: random selection by it costs nothing beyond Theorems 5.1/5.2);
    2. the dataset's public validation split (objective 'validation'), when the caller
       may read the models (scope 'publish'): scoring reads the models, so the plan is
       charged as the joint release of the models scored;
    3. 'signal', the noise-to-signal ratio of each model's training (mechanisms only).

    Which one applied, and why the others did not, goes into the plan's notes."""
    if spec.objective is not None or spec.method in ("checkpoint_average", "ensemble"):
        return spec
    if default_objective(spec) == "metric":  # a metric named with method rs
        return spec
    notes: list[str] = []
    metric = spec.metric or dataset.metric
    if metric is not None and spec.method in ("rs", "auto"):
        undeclared = [m for m in rows if metric_sources(m).get(metric) != "prior"]
        if not undeclared and rows:
            goal = spec.metric_goal or dataset.metric_goal or "max"
            return replace(
                spec,
                objective="metric",
                metric=metric,
                metric_goal=goal,  # type: ignore[arg-type]
                metric_source="prior",
                context_notes=(
                    f"every candidate declares metric {metric!r} 'prior' (fixed without "
                    "these models): the default plan uses it",
                ),
            )
        notes.append(
            f"metric {metric!r} not used by default: {len(undeclared)} candidate(s) do not "
            "declare it 'prior'"
        )
    if dataset.validation_sha256 is not None and spec.method in ("lc", "auto"):
        if may_score:
            return replace(
                spec,
                objective="validation",
                context_notes=(
                    *notes,
                    "the dataset has a public validation split: the default plan scores the "
                    "models on it, which reads them, so the plan is charged to the ledger as "
                    "the joint release of the models scored (scope 'publish')",
                ),
            )
        notes.append(
            "the dataset has a public validation split, but scoring on it reads the models "
            "(scope 'publish', charged): this key gets the mechanism-only default"
        )
    return replace(spec, objective="signal", context_notes=tuple(notes))


def plan_for(
    *,
    session: Session,
    profiles: ProfileSource,
    blobs: BlobStore,
    dataset_id: str,
    model_ids: list[str] | None,
    spec: PlanRequestSpec,
    compute: Compute = in_thread,
    may_score: bool = False,
) -> Plan:
    """The plan for ``spec``; a request without an objective is resolved first
    (``resolve_default``: a plan scored on the validation split only when ``may_score``).
    A plan that read the models carries them in ``exposed``: the caller charges them."""
    dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
    rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=model_ids)
    spec = with_dataset_metric(dataset, spec)
    spec = resolve_default(dataset=dataset, rows=rows, spec=spec, may_score=may_score)
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
    return checkpoint_uncertainty_for(plan=plan, spec=spec, dataset=dataset, rows=rows, blobs=blobs)


__all__ = [
    "PLAN_CACHE",
    "TASK_CACHE",
    "candidate_rows",
    "candidates_from",
    "checkpoint_uncertainty_for",
    "chosen_candidates",
    "guarantee_for",
    "lc_released",
    "load_candidates",
    "plan_cache_key",
    "plan_for",
    "resolve_default",
    "task_cache_key",
    "usable_candidates",
    "uses_lc",
    "validation_evaluator",
    "with_dataset_metric",
]


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
            m.metric_declarations,
            m.name,
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
