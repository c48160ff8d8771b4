"""Releases and the ledger: turning a plan into a served model, within a dataset's cap.

A release is computed once per request: the request (dataset, target, method,
accountant, objective and the candidate models) is hashed, and the same hash
returns the same release. That matters most for random selection: a caller who
could make us draw again would see many samples and the guarantee would fail.

The ledger bounds what the outside world has seen of a dataset by the joint
release of every model any release exposed (Theorem 6.1 of
papers/dp-model-merging.txt; independent runs compose, checkpoints of one run
count as their latest one). With a single release the bound is that release's
own guarantee when it is at the ledger's delta. A release that would push the
bound over the dataset's cap is refused and nothing is released.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service import __version__
from service.accounting import linear_combination as lc
from service.accounting.conversions import round_up
from service.accounting.mechanisms import canonical_json, parse_mechanism
from service.accounting.planning import Plan, PlanRequestSpec, make_plan
from service.errors import BudgetExceeded, StorageError
from service.jobs.plans import candidate_rows, candidates_from, uses_lc, validation_evaluator
from service.jobs.queue import Jobs, profiles_or_pending
from service.merging.base import MergeInput
from service.merging.linear import LinearMerge
from service.merging.random_selection import draw
from service.merging.registry import METHODS
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.models import Dataset, Model, Release, new_id

#: The ledger's delta when a dataset declares no delta cap.
DEFAULT_LEDGER_DELTA = 1e-5

MERGE_FOR = {"lc": "linear", "checkpoint_average": "checkpoint_average"}


@dataclass
class LedgerBound:
    epsilon: float
    delta: float
    accountant: str
    exposed_model_ids: list[str]
    representatives: list[str]


#: a release's output dtype -> its safetensors name
SAFETENSORS_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def ledger_delta(dataset: Dataset) -> float:
    return dataset.delta_cap or DEFAULT_LEDGER_DELTA


def representatives(models: list[Model]) -> list[Model]:
    """One model per run (its latest checkpoint with verified lineage: every earlier
    verified checkpoint is a prefix of it, so post-processing of it); models without a
    run, or whose lineage was not verified, stand alone (independent models)."""
    by_run: dict[str, Model] = {}
    alone: list[Model] = []
    for m in models:
        if m.lineage_run_id is None or not m.lineage_verified:
            alone.append(m)
        else:
            best = by_run.get(m.lineage_run_id)
            if best is None or (m.lineage_step or 0) > (best.lineage_step or 0):
                by_run[m.lineage_run_id] = m
    return sorted([*by_run.values(), *alone], key=lambda m: m.id)


def ledger_bound(
    *,
    session: Session,
    jobs: Jobs,
    dataset: Dataset,
    releases: list[tuple[list[str], float, float]],
) -> LedgerBound:
    """The cumulative bound of ``releases`` = [(exposed model ids, epsilon, delta)]."""
    delta = ledger_delta(dataset)
    exposed = sorted({mid for ids, _, _ in releases for mid in ids})
    if not exposed:
        return LedgerBound(0.0, delta, "none", [], [])
    models = list(repository.models_by_id(session=session, model_ids=exposed).values())
    reps = representatives(models)
    profiles = profiles_or_pending(
        jobs, [(f"model {m.id!r}", parse_mechanism(m.mechanism)) for m in reps]
    )
    rdp = lc.joint_epsilon(profiles, delta, "rdp")
    pld = lc.joint_epsilon(profiles, delta, "pld")
    eps, used = (pld, "pld") if pld <= rdp else (rdp, "rdp")
    if len(releases) == 1 and releases[0][2] <= delta and releases[0][1] < eps:
        eps, used = releases[0][1], "release"
    return LedgerBound(eps, delta, used, exposed, [m.id for m in reps])


def request_hash(
    dataset_id: str, spec: PlanRequestSpec, candidate_ids: list[str], dtype: str | None = None
) -> str:
    payload: dict[str, Any] = {
        "dataset_id": dataset_id,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "method": spec.method,
        "accountant": spec.accountant,
        "objective": spec.objective,
        "metric": spec.metric,
        "metric_goal": spec.metric_goal,
        "metric_source": spec.metric_source,
        "run_id": spec.run_id,
        "last_k": spec.last_k,
        "ema_decay": spec.ema_decay,
        "candidates": sorted(candidate_ids),
    }
    if dtype is not None:  # absent otherwise, so earlier requests keep their hashes
        payload["dtype"] = dtype
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def exposed_by(plan: Plan) -> list[str]:
    """Every model with weight: for RS the whole support (which one was drawn stays secret);
    for weights chosen by validation accuracy, every model that was scored."""
    support = {mid for mid, w in plan.weights.items() if w > 0}
    return sorted(support | set(plan.exposed or ()))


def retarget(
    *,
    session: Session,
    jobs: Jobs,
    blobs: BlobStore,
    dataset_id: str,
    model_ids: list[str] | None,
    spec: PlanRequestSpec,
    deployment: str | None = None,
    dtype: str | None = None,
) -> tuple[Release, bool]:
    """The release for this request: (release, created). Nothing is stored on failure.

    ``dtype`` ("float32", "bfloat16", "float16"): the float tensors of the released file
    in that dtype (an RS release is then the drawn model cast); None keeps the inputs'."""
    dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
    if spec.objective == "metric" and spec.metric is None and dataset.metric:
        spec = PlanRequestSpec(**{**spec.__dict__, "metric": dataset.metric})
    with repository.dataset_lock(session, dataset_id):
        rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=model_ids)
        candidates = candidates_from(rows, jobs, for_lc=uses_lc(spec))
        key = request_hash(dataset_id, spec, [c.id for c in candidates], dtype)
        existing = repository.release_by_request(session=session, request_hash=key)
        if existing is not None:
            return existing, False
        evaluate = validation_evaluator(blobs=blobs, dataset=dataset, spec=spec, rows=rows)
        plan = make_plan(candidates, spec, evaluate)
        exposed = exposed_by(plan)
        _check_cap(session, jobs, dataset, plan, exposed)
        models = repository.models_by_id(session=session, model_ids=plan.weights)
        ordered = sorted(plan.weights)
        release_id = new_id()
        drawn = None
        if plan.method == "rs":
            # the same request in another dtype is the same draw, never a second one
            drawn = _earlier_draw(session, dataset_id, spec, [c.id for c in candidates])
            if drawn is None:
                drawn = ordered[draw([plan.weights[m] for m in ordered])]
            sha, size = models[drawn].sha256, models[drawn].size_bytes
            if not blobs.exists(sha):
                raise StorageError(f"the drawn model's weights ({sha}) are missing")
            if dtype is not None:  # the drawn model, cast (weight 1: exact up to the cast)
                cast = LinearMerge(out_dtype=SAFETENSORS_DTYPE[dtype])
                provenance = release_provenance(release_id, dataset_id, plan)
                sha, size = _merge(blobs, cast, models, {drawn: 1.0}, [drawn], provenance)
        else:
            method = (
                LinearMerge(out_dtype=SAFETENSORS_DTYPE[dtype])
                if dtype is not None
                else METHODS[MERGE_FOR[plan.method]]()
            )
            provenance = release_provenance(release_id, dataset_id, plan)
            sha, size = _merge(blobs, method, models, plan.weights, ordered, provenance)
        release = Release(
            id=release_id,
            dataset_id=dataset_id,
            request_hash=key,
            request={
                **spec.__dict__,
                "model_ids": model_ids,
                "deployment": deployment,
                **({"dtype": dtype} if dtype is not None else {}),
            },
            method=plan.method,
            accountant=plan.accountant,
            epsilon=plan.epsilon,
            delta=plan.delta,
            bound=plan.bound,
            weights=plan.weights,
            drawn_model_id=drawn,
            exposed_model_ids=exposed,
            plan=_plan_record(plan),
            sha256=sha,
            size_bytes=size,
            deployment=deployment,
        )
        session.add(release)
        session.flush()
        return release, True


def _earlier_draw(
    session: Session, dataset_id: str, spec: PlanRequestSpec, candidate_ids: list[str]
) -> str | None:
    """The model an RS release of this request drew in any output dtype, if there is one."""
    for dtype in (None, *SAFETENSORS_DTYPE):
        key = request_hash(dataset_id, spec, candidate_ids, dtype)
        earlier = repository.release_by_request(session=session, request_hash=key)
        if earlier is not None and earlier.drawn_model_id is not None:
            return str(earlier.drawn_model_id)
    return None


def _plan_record(plan: Plan) -> dict[str, Any]:
    record = dataclasses.asdict(plan)
    if record["objective_value"] is not None and not math.isfinite(record["objective_value"]):
        record["objective_value"] = None
    return record


def _check_cap(
    session: Session, jobs: Jobs, dataset: Dataset, plan: Plan, exposed: list[str]
) -> None:
    if dataset.epsilon_cap is None and dataset.delta_cap is None:
        return
    delta = ledger_delta(dataset)
    if plan.delta > delta:
        raise BudgetExceeded(
            f"the release's delta {plan.delta} is above the dataset's delta cap {delta}",
            delta_cap=delta,
        )
    past = [
        (list(r.exposed_model_ids), r.epsilon, r.delta)
        for r in repository.list_releases(session=session, dataset_id=dataset.id)
    ]
    bound = ledger_bound(
        session=session,
        jobs=jobs,
        dataset=dataset,
        releases=[*past, (exposed, plan.epsilon, plan.delta)],
    )
    cap = dataset.epsilon_cap if dataset.epsilon_cap is not None else math.inf
    if bound.epsilon > cap:
        raise BudgetExceeded(
            f"releasing this would bring the dataset's cumulative guarantee to epsilon "
            f"{round_up(bound.epsilon)} at delta {delta}, over its cap of {cap}",
            cumulative_epsilon=round_up(bound.epsilon),
            epsilon_cap=cap,
        )


def cap_warning(session: Session, jobs: Jobs, dataset_id: str, plan: Plan) -> str | None:
    """Why releasing ``plan`` now would be refused by the dataset's cap, or None."""
    dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
    try:
        _check_cap(session, jobs, dataset, plan, exposed_by(plan))
    except BudgetExceeded as exc:
        return str(exc)
    return None


def release_provenance(release_id: str, dataset_id: str, plan: Plan) -> dict[str, str]:
    """The ``retarget.*`` keys a merged file carries in its safetensors ``__metadata__``:
    what was merged and under which guarantee, readable by any safetensors loader, and
    what that guarantee assumes (an LC of several runs: ``retarget.assumptions``)."""
    assumptions = [n.removeprefix("assumes: ") for n in plan.notes if n.startswith("assumes: ")]
    return {
        "retarget.release_id": release_id,
        "retarget.dataset_id": dataset_id,
        "retarget.method": plan.method,
        "retarget.weights": canonical_json(plan.weights),
        "retarget.epsilon": repr(round_up(plan.epsilon)),
        "retarget.delta": repr(plan.delta),
        "retarget.accountant": plan.accountant,
        "retarget.bound": plan.bound,
        "retarget.service_version": __version__,
        **({"retarget.assumptions": "; ".join(assumptions)} if assumptions else {}),
    }


def _merge(
    blobs: BlobStore,
    method: Any,
    models: dict[str, Model],
    weights: dict[str, float],
    ordered: list[str],
    provenance: dict[str, str],
) -> tuple[str, int]:
    """Stream the merge into a staged blob and move it into place (both or nothing)."""
    inputs = []
    for mid in ordered:
        path = blobs.local_path(models[mid].sha256)
        if not path.is_file():
            raise StorageError(f"the weights of model {mid!r} are missing from the store")
        inputs.append(MergeInput(path, weights[mid]))
    staged = blobs.stage(method.chunks(inputs, provenance))
    blobs.promote(staged)
    return staged.sha256, staged.size
