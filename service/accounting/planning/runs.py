"""Checkpoints of one run: a later checkpoint that meets the target is preferred.

The checkpoints of a run with verified lineage are prefixes of one another
(``service.accounting.mechanisms.lineage``), so the latest checkpoint L that meets
the target alone is, privacy-wise, a release that covers every earlier one (each is
a post-processing of L's run prefix), and it is the one that trained longest. The
default objective therefore never spends its budget on an earlier checkpoint of a
run whose later checkpoint fits: those are left out before planning, and the plan
says so. Checkpoints after L (which do not fit alone) stay: random selection may
still give them some probability. Checkpoints whose lineage was not verified are
independent models and are left alone.
"""

from __future__ import annotations

from service.accounting.planning.types import Candidate, PlanRequestSpec


def alone_epsilon(candidate: Candidate, spec: PlanRequestSpec) -> float:
    """The model's own epsilon at the request's delta (the best accountant asked for)."""
    return min(candidate.profile.epsilon(spec.delta, a) for a in spec.accountants())  # type: ignore[arg-type]


def latest_fitting(
    candidates: list[Candidate], spec: PlanRequestSpec, keep_later: bool = True
) -> tuple[list[Candidate], list[str]]:
    """The candidates without the checkpoints that come before the latest checkpoint of
    their run that meets the target alone; ``keep_later`` False also drops the run's
    checkpoints after it (LC: a model that does not fit alone cannot be merged within
    the target). Returns (kept, notes)."""
    runs: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.run_id is not None and c.lineage_verified and c.step is not None:
            runs.setdefault(c.run_id, []).append(c)
    dropped: set[str] = set()
    notes: list[str] = []
    for run_id, group in runs.items():
        if len(group) < 2:
            continue
        group.sort(key=lambda c: c.step or 0)
        fits = [i for i, c in enumerate(group) if alone_epsilon(c, spec) <= spec.epsilon]
        if not fits:
            continue
        last = fits[-1]
        gone = [c for i, c in enumerate(group) if i < last or (i > last and not keep_later)]
        if not gone:
            continue
        dropped.update(c.id for c in gone)
        chosen = group[last]
        earlier = [c for c in gone if (c.step or 0) < (chosen.step or 0)]
        if earlier:
            notes.append(
                f"run {run_id!r}: its checkpoint at step {chosen.step} ({chosen.id}) meets the "
                f"target, so its {len(earlier)} earlier checkpoint(s) are left out (a later "
                "checkpoint of a verified run covers the earlier ones and trained longer)"
            )
    return [c for c in candidates if c.id not in dropped], notes
