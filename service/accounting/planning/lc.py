"""Linear combination plans: least merged noise whose sound LC bound meets the target.

The bound is ``lc.accountant.LCAccountant`` (the models' runs before their last
step released jointly, composed with one merged last step). Which models to merge is
chosen in polynomial time: for two orders of the models (least noise first, most
private first) the nested prefixes whose joint part stays below the target (a
bisection: adding a model never lowers it), the few largest of them, and every model
alone; weights are then searched on each support and the least noisy feasible plan
wins. Every plan's epsilon is the bound recomputed for the weights returned.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import partial

import numpy as np
from numpy.typing import NDArray
from scipy import optimize

from service.accounting.lc import accountant as lc
from service.accounting.lc.paper import paper_epsilon
from service.accounting.planning.gaussian_weights import (
    largest_gaussian_mu,
    optimal_gaussian_weights,
)
from service.accounting.planning.runs import latest_fitting
from service.accounting.planning.search import inverse_variance, search_weights
from service.accounting.planning.signal import noise_to_signal
from service.accounting.planning.types import (
    Candidate,
    Plan,
    PlanRequestSpec,
    first_difference,
    infeasible,
    noise_variance,
)
from service.errors import Unsupported

#: Nested supports tried per order, from the largest feasible one down.
SUPPORTS_PER_ORDER = 3
BOUND = "sound LC: joint release of each run before its last step + one merged last step"
JOINT_BOUND = "Theorem 6.1 (joint release of the merged models)"


def lc_candidates(
    candidates: list[Candidate], strict: bool
) -> tuple[list[Candidate], list[lc.LCInput], list[str]]:
    """The models LC may merge and how each enters the bound, or ``Unsupported`` with
    the reason (strict), or the largest compatible set with notes (not strict)."""
    notes: list[str] = []

    def refuse_or_drop(bad: list[Candidate], reason: str) -> None:
        if not bad:
            return
        if strict:
            raise Unsupported(f"linear combination refused: {reason}; random selection still works")
        notes.append(f"left out of LC ({reason}): {', '.join(c.id for c in bad)}")

    pool = list(candidates)
    bad = [c for c in pool if c.profile.non_private]
    refuse_or_drop(bad, "a non-private model has no guarantee to combine")
    pool = [c for c in pool if c not in bad]

    runs: dict[str, list[Candidate]] = {}
    for c in pool:
        if c.run_id is not None:
            runs.setdefault(c.run_id, []).append(c)
    correlated = [c for group in runs.values() if len(group) > 1 for c in group]
    if strict:
        refuse_or_drop(
            correlated,
            "checkpoints of one run share their noise (use method 'checkpoint_average')",
        )
    else:
        latest = {run: max(group, key=lambda c: c.step or 0) for run, group in runs.items()}
        dropped = [c for c in correlated if latest[c.run_id or ""] is not c]
        refuse_or_drop(dropped, "an earlier checkpoint of a run already represented")
        pool = [c for c in pool if c not in dropped]

    if pool:
        common, _ = Counter(c.signature_hash for c in pool).most_common(1)[0]
        bad = [c for c in pool if c.signature_hash != common]
        if bad:
            first = next(c for c in pool if c.signature_hash == common)
            refuse_or_drop(
                bad,
                f"tensor names, shapes or dtypes differ: {bad[0].label} and {first.label} "
                f"({first_difference(bad[0], first)})",
            )
        pool = [c for c in pool if c not in bad]
    if not pool:
        raise Unsupported("no candidate model can be linearly combined")
    inputs = [lc.lc_input(c.mechanism) for c in pool]
    for c, inp in zip(pool, inputs, strict=True):
        if inp.note:
            notes.append(f"{c.id}: {inp.note}")
    return pool, inputs, notes


def released_profiles(kept: list[Candidate], inputs: list[lc.LCInput]) -> list:
    return [
        c.released_profile
        if c.released_profile is not None and inp.final is not None
        else lc.released_profile(inp, c.profile)
        for c, inp in zip(kept, inputs, strict=True)
    ]


def plan_lc(candidates: list[Candidate], spec: PlanRequestSpec, objective: str) -> Plan:
    if objective not in ("noise", "signal"):
        raise Unsupported(
            "a linear combination's metric is not known without evaluating it: use objective "
            "'signal' (the merged noise-to-signal ratio) or 'noise' (the merged noise "
            "variance, the mean-estimation optimum)"
        )
    run_notes: list[str] = []
    if objective == "signal" and not spec.strict:  # named checkpoints: refused below
        candidates, run_notes = latest_fitting(candidates, spec, keep_later=False)
    kept, inputs, notes = lc_candidates(candidates, spec.strict)
    proxy = noise_to_signal if objective == "signal" else noise_variance
    v = np.array([proxy(c.mechanism) or math.nan for c in kept])
    if np.any(~np.isfinite(v)):
        raise Unsupported(
            f"objective {objective!r} needs every merged model's noise (DP-SGD with learning "
            "rates, or Gaussian metadata)"
        )
    released = released_profiles(kept, inputs)
    plan, idx, lam = _best(kept, inputs, released, v, spec)
    plan.objective = objective  # type: ignore[assignment]
    plan.notes = run_notes + notes + plan.notes
    if len(idx) > 1:
        plan.notes.append("assumes: " + "; ".join(lc.ASSUMPTIONS))
        plan.paper_epsilon = paper_epsilon([kept[i].mechanism for i in idx], lam, spec.delta)
    return plan


def _best(
    kept: list[Candidate],
    inputs: list[lc.LCInput],
    released: list,
    v: NDArray,
    spec: PlanRequestSpec,
) -> tuple[Plan, list[int], NDArray]:
    best: tuple[tuple[float, float], Plan, list[int], NDArray] | None = None
    min_seen = math.inf
    singles = {}
    for i, c in enumerate(kept):
        eps, acc = min((c.profile.epsilon(spec.delta, a), a) for a in spec.accountants())  # type: ignore[arg-type]
        singles[i] = eps
        min_seen = min(min_seen, eps)
        if eps <= spec.epsilon and (best is None or (float(v[i]), eps) < best[0]):
            plan = _plan([c], np.ones(1), eps, acc, spec, float(v[i]), "the model alone")
            plan.heuristic = c.profile.heuristic
            best = ((float(v[i]), eps), plan, [i], np.ones(1))
    supports = _supports(inputs, released, v, singles, spec)
    # no weights on a support beat inverse-variance ones (the unconstrained optimum):
    # supports in order of that floor, stopping once it is above the best plan found
    supports.sort(key=lambda idx: _floor(v[idx]))
    for idx in supports:
        if best is not None and _floor(v[idx]) > best[0][0]:
            break
        sub_v = v[idx]
        acct = lc.LCAccountant([inputs[i] for i in idx], [released[i] for i in idx], spec.delta)
        start = None
        for acc in _search_order(spec):
            # weights with nothing left to search: the previous accountant's when they are
            # already the unconstrained optimum, or inverse-variance ones where the bound
            # does not depend on the weights
            if start is not None and float(np.sum(start**2 * sub_v)) <= _floor(sub_v):
                fixed: NDArray | None = start
            elif not acct.uses_final_step:
                fixed = inverse_variance(sub_v)
            else:
                fixed = None
            if fixed is not None:
                eps = seen = acct.epsilon(fixed, acc)
                found = fixed if eps <= spec.epsilon else None
            else:
                budget = 60 if acc == "rdp" else 24
                found, eps, seen = search_weights(
                    partial(acct.epsilon, accountant=acc), sub_v, spec.epsilon, start, budget
                )
            min_seen = min(min_seen, seen)
            if found is None:
                continue
            found, eps = _polish_fixed_queries(acct, found, eps, sub_v, spec, acc)
            eps = acct.certify(found, acc)  # the best real order: never above the search's
            start = found
            value = float(np.sum(found**2 * sub_v))
            if best is None or (value, eps) < best[0]:
                bound = BOUND if acct.uses_final_step else JOINT_BOUND
                plan = _plan([kept[i] for i in idx], found, eps, acc, spec, value, bound)
                plan.heuristic = acct.heuristic
                best = ((value, eps), plan, idx, found)
    if best is None:
        raise infeasible(spec, min_seen, "linear combination")
    return best[1], best[2], best[3]


def _floor(v: NDArray) -> float:
    """The least merged noise of any weights on a support: inverse-variance weights'."""
    return float(1.0 / np.sum(1.0 / v)) * (1 + 1e-12)


def _search_order(spec: PlanRequestSpec) -> tuple[str, ...]:
    """PLD first where both are asked for: it is the tighter of the two for DP-SGD, and
    when its weights are already the unconstrained optimum, RDP only certifies them."""
    return tuple(sorted(spec.accountants(), key=lambda a: a != "pld"))


def _supports(
    inputs: list[lc.LCInput],
    released: list,
    v: NDArray,
    singles: dict[int, float],
    spec: PlanRequestSpec,
) -> list[list[int]]:
    """Nested prefixes of two orders whose joint part (RDP, a cheap upper bound) is below
    the target: the largest few per order. Polynomial: O(n log n) joint evaluations."""
    n = len(inputs)
    if n < 2:
        return []
    orders = [list(np.argsort(v, kind="stable")), sorted(range(n), key=lambda i: singles[i])]
    out: list[list[int]] = []
    for order in orders:

        def joint_ok(k: int, order: list[int] = order) -> bool:
            acct = lc.LCAccountant(
                [inputs[i] for i in order[:k]], [released[i] for i in order[:k]], spec.delta
            )
            return acct.joint_epsilon("rdp") < spec.epsilon

        lo, hi = 1, n  # largest k in [2, n] with joint_ok, by bisection (monotone)
        if not joint_ok(2):
            continue
        lo = 2
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if joint_ok(mid):
                lo = mid
            else:
                hi = mid - 1
        for k in range(lo, max(1, lo - SUPPORTS_PER_ORDER), -1):
            idx = sorted(order[:k])
            if idx not in out:
                out.append(idx)
    return out


def _plan(
    chosen: list[Candidate],
    lam: NDArray,
    eps: float,
    acc: str,
    spec: PlanRequestSpec,
    value: float,
    bound: str,
) -> Plan:
    return Plan(
        method="lc",
        accountant=acc,  # type: ignore[arg-type]
        weights={c.id: float(w) for c, w in zip(chosen, lam, strict=True) if w > 0},
        epsilon=eps,
        delta=spec.delta,
        objective="noise",
        objective_value=value,
        expected_utility=None,
        bound=bound,
    )


def _polish_fixed_queries(
    acct: lc.LCAccountant,
    lam: NDArray,
    eps: float,
    v: NDArray,
    spec: PlanRequestSpec,
    accountant: str,
) -> tuple[NDArray, float]:
    """For fixed Gaussian queries the bound is exact and smooth (mu(lambda)), so the
    least-noise weights solve min sum lambda^2 v s.t. mu(lambda) <= mu(target). With equal
    query counts that program is solved exactly (``gaussian_weights``); otherwise by SLSQP
    from the search's answer. The result is kept only when it is better and its own
    certificate meets the target."""
    if not all(i.fixed_queries > 0 for i in acct.inputs) or lam.shape[0] < 2:
        return lam, eps
    mu_max = largest_gaussian_mu(spec.epsilon, spec.delta, accountant)
    counts = {i.fixed_queries for i in acct.inputs}
    finals = [i.final for i in acct.inputs if i.final is not None]
    if len(counts) == 1 and len(finals) == lam.shape[0]:
        (k,) = counts
        sens = np.array([f.shift for f in finals])
        std = np.array([f.noise for f in finals])
        exact = optimal_gaussian_weights(sens, std, mu_max / math.sqrt(k) * (1 - 1e-9))
        candidates = [] if exact is None else [exact]
    else:
        candidates = [_slsqp(acct, lam, v, mu_max)]
    for cand in candidates:
        cand_eps = acct.epsilon(cand, accountant)
        if cand_eps <= spec.epsilon and float(np.sum(cand**2 * v)) < float(np.sum(lam**2 * v)):
            lam, eps = cand, cand_eps
    return lam, eps


def _slsqp(acct: lc.LCAccountant, lam: NDArray, v: NDArray, mu_max: float) -> NDArray:
    result = optimize.minimize(
        lambda x: float(np.sum(x**2 * v)),
        lam,
        jac=lambda x: 2 * x * v,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * lam.shape[0],
        constraints=[
            {"type": "eq", "fun": lambda x: float(x.sum()) - 1.0},
            {"type": "ineq", "fun": lambda x: mu_max**2 - lc.fixed_queries_mu(acct.inputs, x) ** 2},
        ],
        options={"maxiter": 200, "ftol": 1e-14},
    )
    cand = np.clip(np.asarray(result.x, dtype=np.float64), 0.0, None)
    return np.asarray(cand / cand.sum())
