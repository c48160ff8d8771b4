"""Drawing a private selection once, and charging it (``planning.private_selection``).

The plan says which models are eligible and at which Gumbel scale; here the noise is
drawn with the OS CSPRNG (``secrets``), under the dataset's lock, and stored in the
ledger's record of the selection (an exposure of kind ``private_selection`` that
names every eligible model and carries the selection's epsilon). The record's key is
what fixes the selection's law (dataset, metric, eligible models, their values'
scale, the selection's epsilon), not the API key: the same selection asked again, by
anyone, reads the stored choice and costs nothing new (it is the same output), while
any other selection draws fresh noise and is charged again. The ledger adds each
recorded selection's epsilon to the joint release of the models exposed
(``ledger.charges.ledger_bound``).
"""

from __future__ import annotations

import hashlib
import math
import secrets
from contextlib import nullcontext

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.mechanisms import canonical_json
from service.accounting.planning import Plan
from service.accounting.planning.private_selection import noisy_argmax
from service.errors import StorageError
from service.ledger.charges import SELECTION_KIND, check_cap
from service.profiles.source import ProfileSource
from service.registry import repository
from service.registry.exposures import record_exposure
from service.registry.models import Exposure


def selection_subject(dataset_id: str, plan: Plan) -> str:
    sel = plan.selection or {}
    payload = {
        "kind": SELECTION_KIND,
        "dataset": dataset_id,
        "metric": sel.get("metric"),
        "eligible": sorted(sel.get("eligible", [])),
        "values": [repr(v) for v in sel.get("values", [])],
        "scale": repr(sel.get("scale")),
        "selection_epsilon": repr(plan.selection_epsilon),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def draw(
    *,
    session: Session,
    profiles: ProfileSource,
    dataset_id: str,
    plan: Plan,
    key_id: str | None,
    key_name: str,
    locked: bool = False,
) -> Plan:
    """The plan with its selection drawn (weights: the chosen model alone), charged to
    the ledger on first draw (``BudgetExceeded`` and nothing recorded when the cap would
    break). A plan that is not a pending private selection is returned as it is.
    ``locked``: the caller holds the dataset's lock already (a release)."""
    sel = plan.selection
    if sel is None or "values" not in sel:
        return plan
    subject = selection_subject(dataset_id, plan)
    eligible = list(sel["eligible"])
    lock = nullcontext() if locked else repository.dataset_lock(session, dataset_id)
    with lock:
        row = session.scalar(
            select(Exposure).where(
                Exposure.dataset_id == dataset_id,
                Exposure.subject == subject,
                Exposure.kind == SELECTION_KIND,
            )
        )
        if row is None:
            dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
            check_cap(
                session,
                profiles,
                dataset,
                (eligible, math.inf, 0.0),
                "this private selection",
                extra_epsilon=float(plan.selection_epsilon or 0.0),
            )
            uniforms = [(secrets.randbits(53) + 0.5) / 2**53 for _ in eligible]
            chosen = eligible[noisy_argmax(sel["values"], sel["scale"], uniforms)]
            record_exposure(
                session=session,
                dataset_id=dataset_id,
                kind=SELECTION_KIND,
                model_ids=eligible,
                key_id=key_id,
                key_name=key_name,
                detail={
                    "metric": sel["metric"],
                    "chosen": chosen,
                    "selection_epsilon": plan.selection_epsilon,
                    "epsilon": plan.epsilon,
                    "delta": plan.delta,
                },
                subject=subject,
            )
            fresh = True
        else:
            chosen = str((row.detail or {}).get("chosen", ""))
            if chosen not in eligible:
                raise StorageError("the stored private selection names no eligible model")
            row.count += 1
            session.flush()
            fresh = False
    plan.weights = {chosen: 1.0}
    plan.selection = {k: v for k, v in sel.items() if k != "values"} | {"chosen": chosen}
    plan.notes = [
        *plan.notes,
        f"selected {plan.names.get(chosen, chosen)} ({chosen}); "
        + ("drawn now" if fresh else "the choice drawn when this selection was first asked"),
    ]
    return plan
