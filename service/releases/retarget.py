"""Releases: turning a plan into a served model, within the dataset's cap (``ledger``).

A release is computed once per request: what in the request can change the plan
(``request_hash``: dataset, target, method, accountant, the objective and the
fields it reads, the candidate models, the output dtype) is hashed, and the same
hash returns the same release. Fields the plan ignores (a metric under objective
'noise', checkpoint fields for RS) and defaults written out or left implicit hash
alike.

Random selection draws with common random numbers. Each dataset has one secret
uniform U on [0, 1) (drawn once with the OS CSPRNG, stored, never shown), and an
RS release of a plan pi is the model at which pi's CDF, over the support ordered
by model id, first exceeds U. Why this is sound, and what it buys:

- One release: U is uniform and independent of the data and of pi (pi is a
  function of the mechanisms, or of metrics fixed in advance; a pi read from the
  models is a point mass charged as the joint release of every model read), so
  the release is exactly a draw from pi and Theorems 5.1/5.2 give its epsilon.
- Many releases: the view is (U, theta_{i_1}, ..., theta_{i_k}) with
  i_j = F_j^{-1}(U). Given U that is a deterministic release of the models
  {theta_i : i in I(U)}, with I(U) inside the union of the supports, so the whole
  view is a post-processing of the joint release of that union (Theorem 6.1),
  which is what the ledger charges, whatever the number of releases. The ledger
  may not charge less: plans whose CDFs differ enough put different models at U.
  The per-release epsilon is each release's own guarantee, never the cumulative one.
- What it buys: plans whose CDFs differ by d select the same model unless U lies
  within d of a boundary, so requests nudged by 1e-9 (or naming a field the plan
  ignores, or another candidate set with the same support) show one draw, not
  one new draw each. Independent draws would let k such requests reveal up to k
  models of the support at the price the ledger already charges; with CRN k
  near-identical plans reveal what one draw does.

The ledger itself is in ``service.ledger.charges``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from service import __version__
from service.accounting.conversions import round_up
from service.accounting.mechanisms import canonical_json
from service.accounting.planning import Plan, PlanRequestSpec, default_objective, make_plan
from service.errors import BudgetExceeded, InvalidInput, StorageError
from service.ledger.charges import check_cap
from service.merging.random_selection import select
from service.plans.planner import (
    candidate_rows,
    checkpoint_uncertainty_for,
    chosen_candidates,
    resolve_default,
    uses_lc,
    validation_evaluator,
    with_dataset_metric,
)
from service.plans.tasks import Compute, in_thread
from service.profiles.source import ProfileSource
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.exposures import selection_uniform
from service.registry.models import Release, new_id
from service.releases import artifacts as release_artifacts
from service.releases.artifacts import Artifact
from service.releases.selection import draw as draw_selection

#: a release's output dtype -> its safetensors name
SAFETENSORS_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def request_hash(
    dataset_id: str,
    spec: PlanRequestSpec,
    candidate_ids: list[str],
    dtype: str | None = None,
    max_shard_size: int | None = None,
) -> str:
    """The release's idempotency key: only what can change the plan or the file.

    The objective is resolved (left out or written, the same); the metric fields
    count only for objective 'metric', the checkpoint fields only for
    'checkpoint_average' and 'ensemble' (and ``combine`` only for 'ensemble').
    Near-identical targets still hash apart (they are other plans), and draw with the
    dataset's common uniform (module doc)."""
    objective = default_objective(spec)
    payload: dict[str, Any] = {
        "v": 2,
        "dataset_id": dataset_id,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "method": spec.method,
        "accountant": spec.accountant,
        "objective": objective,
        "candidates": sorted(candidate_ids),
        "dtype": dtype,
        **({"max_shard_size": max_shard_size} if max_shard_size is not None else {}),
    }
    if objective == "metric":
        payload.update(
            metric=spec.metric, metric_goal=spec.metric_goal, metric_source=spec.metric_source
        )
        if spec.metric_source == "private":
            payload.update(selection_epsilon=spec.selection_epsilon)
    if spec.method in ("checkpoint_average", "ensemble") and objective != "validation":
        payload.update(run_id=spec.run_id, last_k=spec.last_k, ema_decay=spec.ema_decay)
    if spec.method == "ensemble":
        payload.update(combine=spec.combine)
    if spec.method in ("checkpoint_average", "ensemble") and spec.metric is not None:
        payload.update(uncertainty_metric=spec.metric)  # the metric of its uncertainty
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def legacy_request_hash(
    dataset_id: str, spec: PlanRequestSpec, candidate_ids: list[str], dtype: str | None = None
) -> str:
    """The key releases were stored under before ``request_hash`` was normalised: the
    same request made then returns its release, and its draw, rather than a new one."""
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
    if dtype is not None:
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
    profiles: ProfileSource,
    blobs: BlobStore,
    dataset_id: str,
    model_ids: list[str] | None,
    spec: PlanRequestSpec,
    deployment: str | None = None,
    dtype: str | None = None,
    max_shard_size: int | None = None,
    defer: tuple[int, Callable[[str, Callable[[], Artifact]], None]] | None = None,
    compute: Compute = in_thread,
) -> tuple[Release, bool]:
    """The release for this request: (release, created). Nothing is stored on failure.

    ``dtype`` ("float32", "bfloat16", "float16"): the float tensors of the released file
    in that dtype (an RS release is then the drawn model cast); None keeps the inputs'.
    ``max_shard_size``: bundles only, the largest output shard. ``defer`` = (bytes,
    submit): a merge of models larger than ``bytes`` is not run here; the release is
    stored ``pending`` and ``submit(release_id, produce)`` runs ``produce`` later
    (``service.releases.pending``). ``compute`` runs the plan (``service.plans.tasks.Compute``)."""
    if spec.method == "ensemble" and (dtype is not None or max_shard_size is not None):
        raise InvalidInput(
            "an ensemble ships its members' files as they were registered: dtype and "
            "max_shard_size do not apply"
        )
    dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
    spec = with_dataset_metric(dataset, spec)
    with repository.dataset_lock(session, dataset_id):
        rows = candidate_rows(session=session, dataset_id=dataset_id, model_ids=model_ids)
        # a release is charged for every model it reads: scoring on the split is allowed
        spec = resolve_default(dataset=dataset, rows=rows, spec=spec, may_score=True)
        candidates, left_out = chosen_candidates(rows, profiles, model_ids, for_lc=uses_lc(spec))
        rows = [r for r in rows if r.id in {c.id for c in candidates}]
        candidate_ids = [c.id for c in candidates]
        key = request_hash(dataset_id, spec, candidate_ids, dtype, max_shard_size)
        existing = repository.release_by_request(
            session=session, request_hash=key
        ) or repository.release_by_request(
            session=session,
            request_hash=legacy_request_hash(dataset_id, spec, candidate_ids, dtype),
        )
        if existing is not None:
            return existing, False
        evaluate = validation_evaluator(blobs=blobs, dataset=dataset, spec=spec, rows=rows)
        # a plan scored on the validation split reads blobs: computed here; any other
        # through ``compute`` (in the app: a plan process, within its limits)
        plan = (
            make_plan(candidates, spec, evaluate) if evaluate else compute("plan", candidates, spec)
        )
        plan.notes.extend(left_out)
        plan = checkpoint_uncertainty_for(
            plan=plan, spec=spec, dataset=dataset, rows=rows, blobs=blobs
        )
        # a private selection: drawn once (or read back), charged with its own epsilon
        plan = draw_selection(
            session=session,
            profiles=profiles,
            dataset_id=dataset_id,
            plan=plan,
            key_id=None,
            key_name="release",
            locked=True,
        )
        exposed = exposed_by(plan)
        check_cap(session, profiles, dataset, (exposed, plan.epsilon, plan.delta))
        models = repository.models_by_id(session=session, model_ids=plan.weights)
        ordered = sorted(plan.weights)
        release_id = new_id()
        drawn = None
        if plan.method == "rs":
            # common random numbers (module doc): the same plan in another dtype, or a
            # near-identical one, selects the same model; a request first released
            # before them keeps its own draw
            drawn = _legacy_draw(session, dataset_id, spec, candidate_ids)
            if drawn is None:
                u = selection_uniform(session=session, dataset_id=dataset_id)
                drawn = ordered[select([plan.weights[m] for m in ordered], u)]
            if not blobs.exists(models[drawn].sha256):
                raise StorageError(
                    f"the drawn model's weights ({models[drawn].sha256}) are missing"
                )
        provenance = release_provenance(release_id, dataset_id, plan)
        out_dtype = SAFETENSORS_DTYPE[dtype] if dtype is not None else None

        def produce() -> Artifact:
            return release_artifacts.produce(
                blobs=blobs,
                models=models,
                method=plan.method,
                weights=plan.weights,
                drawn=drawn,
                out_dtype=out_dtype,
                max_shard_size=max_shard_size,
                provenance=provenance,
            )

        merged = [drawn] if drawn is not None else ordered
        # an ensemble merges nothing: its members' stored files are listed as they are
        heavy = plan.method != "ensemble" and (
            drawn is None or out_dtype is not None or max_shard_size is not None
        )
        if defer is not None and heavy and max(models[m].size_bytes for m in merged) > defer[0]:
            # async: the budget is reserved now (a pending row the ledger counts), the
            # merge runs after the lock is released, and a failure deletes the row
            sha, size, kind, files = "", 0, models[merged[0]].kind, None
            defer[1](release_id, produce)
            status = "pending"
        else:
            sha, size, kind, files = produce()
            status = "done"
        release = Release(
            id=release_id,
            dataset_id=dataset_id,
            request_hash=key,
            request={
                **spec.__dict__,
                "model_ids": model_ids,
                "deployment": deployment,
                **({"dtype": dtype} if dtype is not None else {}),
                **({"max_shard_size": max_shard_size} if max_shard_size is not None else {}),
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
            kind=kind,
            files=files,
            status=status,
        )
        session.add(release)
        session.flush()
        return release, True


def _legacy_draw(
    session: Session, dataset_id: str, spec: PlanRequestSpec, candidate_ids: list[str]
) -> str | None:
    """The model an RS release of this very request drew, in any output dtype, before
    draws used the dataset's uniform (``legacy_request_hash``), if there is one."""
    for dtype in (None, *SAFETENSORS_DTYPE):
        key = legacy_request_hash(dataset_id, spec, candidate_ids, dtype)
        earlier = repository.release_by_request(session=session, request_hash=key)
        if earlier is not None and earlier.drawn_model_id is not None:
            return str(earlier.drawn_model_id)
    return None


def _plan_record(plan: Plan) -> dict[str, Any]:
    record = dataclasses.asdict(plan)
    if record["objective_value"] is not None and not math.isfinite(record["objective_value"]):
        record["objective_value"] = None
    return record


def plan_from_record(record: dict[str, Any]) -> Plan:
    """The plan a release recorded (``_plan_record``), as the request computed it."""
    return Plan(**{f.name: record[f.name] for f in dataclasses.fields(Plan) if f.name in record})


def cap_warning(
    session: Session, profiles: ProfileSource, dataset_id: str, plan: Plan
) -> str | None:
    """Why releasing ``plan`` now would be refused by the dataset's cap, or None."""
    dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
    try:
        check_cap(session, profiles, dataset, (exposed_by(plan), plan.epsilon, plan.delta))
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
        # a private selection: its own epsilon, included in retarget.epsilon
        **(
            {"retarget.selection_epsilon": repr(plan.selection_epsilon)}
            if plan.selection_epsilon is not None
            else {}
        ),
        **({"retarget.assumptions": "; ".join(assumptions)} if assumptions else {}),
        # an ensemble: how its members' outputs combine (ensemble.json says it in full)
        **({"retarget.combine": plan.combine} if plan.combine is not None else {}),
        # checkpoints of one run: a metric's spread over them (service.plans.uncertainty)
        **(
            {"retarget.uncertainty": canonical_json(plan.uncertainty)}
            if plan.uncertainty is not None
            else {}
        ),
        # the guarantee rests on an approximation the trainer opted into
        **({"retarget.heuristic": "true"} if plan.heuristic else {}),
    }
