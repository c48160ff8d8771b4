"""The ledger: what the outside world has seen of a dataset, and its cap.

Everything that leaves the service and depends on private models is charged by
the models it exposes: a release (an LC merge exposes the models with weight, an
RS release its whole support, a plan scored by the models every model scored),
a raw download of a registered model (that model, exactly as an RS release of it
alone would), and a dry-run plan whose answer was computed from the models
themselves (every model read: validation scores, metrics with
``metric_source: "models"``).

The ledger bounds the whole view by the joint release of every exposed model
(Theorem 6.1 of "Differentially Private Model Merging" (arXiv:2604.20985); independent runs compose,
checkpoints of one run count as their latest one): whatever was shown is a
function of those models and of randomness independent of the data (an RS
draw's uniform included), so it is post-processing of releasing them all, however
many answers there were. With a single release and nothing else the bound is
that release's own guarantee when it is at the ledger's delta (smaller when RS
mixed). An exposure is charged only through its models. Anything that would push
the bound over the dataset's cap is refused and nothing is shown.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.accounting.conversions import round_up
from service.accounting.joint_release import joint_release_epsilon, profile_identity
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import PrivacyProfile
from service.errors import BudgetExceeded
from service.jobs.lru import Lru
from service.profiles.source import ProfileSource, profiles_or_pending
from service.registry import repository
from service.registry.exposures import list_exposures, record_exposure
from service.registry.models import Dataset, Exposure, Model

#: Joint-release bounds by (multiset of profiles, delta): pure functions of the key.
_BOUNDS: Lru[str, tuple[float, str]] = Lru(4096)

#: The ledger's delta when a dataset declares no delta cap.
DEFAULT_LEDGER_DELTA = 1e-5

#: (exposed model ids, epsilon, delta): one release or exposure, as the ledger sees it
Entry = tuple[list[str], float, float]

#: The exposure kind of a private selection: its models, plus its own epsilon (pure DP)
SELECTION_KIND = "private_selection"


def selections_epsilon(session: Session, dataset_id: str) -> float:
    """The sum of every recorded private selection's own epsilon (each pure DP, drawn
    once: a repeat shows the same choice and is one row)."""
    return sum(
        float((e.detail or {}).get("selection_epsilon") or 0.0)
        for e in list_exposures(session=session, dataset_id=dataset_id)
        if e.kind == SELECTION_KIND
    )


@dataclass
class LedgerBound:
    epsilon: float
    delta: float
    accountant: str
    exposed_model_ids: list[str]
    representatives: list[str]
    #: some exposed model's profile rests on an approximation (shuffled batches
    #: accounted as Poisson, opted into with accept_poisson_approximation)
    heuristic: bool = False


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


def exposure_entry(exposure: Exposure) -> Entry:
    """An exposure is charged through its models only (epsilon inf: never the
    single-release shortcut of ``ledger_bound``)."""
    return list(exposure.model_ids), math.inf, 0.0


def ledger_entries(session: Session, dataset_id: str) -> list[Entry]:
    """Every release and every exposure of the dataset, as the ledger charges them."""
    releases = repository.list_releases(session=session, dataset_id=dataset_id)
    return [
        *((list(r.exposed_model_ids), r.epsilon, r.delta) for r in releases),
        *(exposure_entry(e) for e in list_exposures(session=session, dataset_id=dataset_id)),
    ]


def ledger_bound(
    *,
    session: Session,
    profiles: ProfileSource,
    dataset: Dataset,
    releases: list[Entry],
    extra_epsilon: float = 0.0,
) -> LedgerBound:
    """The cumulative bound of ``releases`` = [(exposed model ids, epsilon, delta)],
    plus the dataset's recorded private selections and ``extra_epsilon`` (one about to
    be drawn): each is eps_sel-DP given the models it read, so by adaptive composition
    (basic: pure DP adds its epsilon at the same delta) their epsilons add to the joint
    release of the exposed models."""
    delta = ledger_delta(dataset)
    selections = selections_epsilon(session, dataset.id) + extra_epsilon
    exposed = sorted({mid for ids, _, _ in releases for mid in ids})
    if not exposed:
        return LedgerBound(selections, delta, "none", [], [])
    models = list(repository.models_by_id(session=session, model_ids=exposed).values())
    reps = representatives(models)
    found = profiles_or_pending(
        profiles, [(f"model {m.id!r}", parse_mechanism(m.mechanism)) for m in reps]
    )
    eps, used = joint_bound(found, delta)
    if len(releases) == 1 and releases[0][2] <= delta and releases[0][1] < eps:
        eps, used = releases[0][1], "release"
    eps += selections
    heuristic = any(p.heuristic for p in found)
    return LedgerBound(eps, delta, used, exposed, [m.id for m in reps], heuristic)


def joint_bound(profiles: list[PrivacyProfile], delta: float) -> tuple[float, str]:
    """The joint release's bound, cached by the multiset of profiles and delta (the
    releases page computes one per release, and most repeat: the same exposed set)."""
    key = hashlib.sha256(
        ("|".join(sorted(profile_identity(p) for p in profiles)) + f"@{delta!r}").encode()
    ).hexdigest()
    hit = _BOUNDS.get(key)
    if hit is None:
        hit = joint_release_epsilon(profiles, delta)
        _BOUNDS.put(key, hit)
    return hit


def check_cap(
    session: Session,
    profiles: ProfileSource,
    dataset: Dataset,
    entry: Entry,
    what: str = "releasing this",
    extra_epsilon: float = 0.0,
) -> None:
    """Refuse (``BudgetExceeded``) what would push the dataset over its cap: its delta
    above the delta cap, or the ledger's bound with ``entry`` added over the epsilon cap."""
    if dataset.epsilon_cap is None and dataset.delta_cap is None:
        return
    delta = ledger_delta(dataset)
    if entry[2] > delta:
        raise BudgetExceeded(
            f"the release's delta {entry[2]} is above the dataset's delta cap {delta}",
            delta_cap=delta,
        )
    past = ledger_entries(session, dataset.id)
    bound = ledger_bound(
        session=session,
        profiles=profiles,
        dataset=dataset,
        releases=[*past, entry],
        extra_epsilon=extra_epsilon,
    )
    cap = dataset.epsilon_cap if dataset.epsilon_cap is not None else math.inf
    if bound.epsilon > cap:
        raise BudgetExceeded(
            f"{what} would bring the dataset's cumulative guarantee to epsilon "
            f"{round_up(bound.epsilon)} at delta {delta}, over its cap of {cap}",
            cumulative_epsilon=round_up(bound.epsilon),
            epsilon_cap=cap,
        )


def expose(
    *,
    session: Session,
    profiles: ProfileSource,
    dataset_id: str,
    kind: str,
    model_ids: list[str],
    key_id: str | None,
    key_name: str,
    detail: dict[str, Any] | None = None,
) -> Exposure:
    """Record that ``model_ids`` are about to be shown (``kind``: download | scored_plan),
    after checking the cap under the dataset's lock (so concurrent releases and
    exposures never overdraw it together). Raises ``BudgetExceeded`` and records
    nothing when the cap would break: then nothing may be shown."""
    what = {"download": "downloading this model", "scored_plan": "answering this plan"}[kind]
    with repository.dataset_lock(session, dataset_id):
        dataset = repository.get_dataset(session=session, dataset_id=dataset_id)
        check_cap(session, profiles, dataset, (model_ids, math.inf, 0.0), what)
        return record_exposure(
            session=session,
            dataset_id=dataset_id,
            kind=kind,
            model_ids=model_ids,
            key_id=key_id,
            key_name=key_name,
            detail=detail,
        )
