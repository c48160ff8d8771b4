"""What a plan process is sent and keeps (``service.plans.tasks`` on the pool's child,
``service.jobs.process_child``), without processes: profile references, the attachment
cache's bound, the "missing" answer."""

from __future__ import annotations

import pickle

from service.accounting.cost import CostLimits
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec
from service.accounting.profiles.profile import compute_profile
from service.jobs.process_child import PROTOCOL, AttachmentCache, answer
from service.plans.tasks import handle, in_thread, profile_ref, strip
from tests.helpers import sgd

A, B, C = (parse_mechanism(sgd(s, steps=20)) for s in (2.0, 3.0, 4.0))


def candidate(name: str, mechanism) -> Candidate:  # type: ignore[no-untyped-def]
    return Candidate(id=name, mechanism=mechanism, profile=compute_profile(mechanism))


def test_profile_refs_tell_apart_what_can_differ() -> None:
    full = compute_profile(A)
    assert profile_ref(full) == profile_ref(compute_profile(A))  # deterministic
    assert profile_ref(full) != profile_ref(compute_profile(B))
    rdp_only = compute_profile(A, limits=CostLimits(max_pld_points=1))
    assert rdp_only.pld is None and full.pld is not None
    assert profile_ref(rdp_only) != profile_ref(full)
    coarser = compute_profile(A, discretization=full.pld.discretization * 10)
    assert profile_ref(coarser) != profile_ref(full)


def test_a_task_over_profiles_it_lacks_asks_for_them_then_answers() -> None:
    cands = [candidate("a", A), candidate("b", B)]
    bare, refs, profiles = strip(cands)
    assert all(c.profile is None for c in bare)
    spec = PlanRequestSpec(epsilon=8.0, delta=1e-5, method="rs")
    cache = AttachmentCache(max_bytes=10**9)
    needed = list(profiles)

    def message(sent: dict[str, bytes]) -> bytes:
        return pickle.dumps(("plan", (bare, refs, (spec,)), needed, sent), PROTOCOL)

    missing = answer(handle, cache, message({}))
    assert missing == ("missing", sorted(profiles))
    sent = {r: pickle.dumps(p, PROTOCOL) for r, p in profiles.items()}
    kind, plan, held = answer(handle, cache, message(sent))
    assert kind == "ok" and sorted(held) == sorted(profiles)
    assert plan.weights == in_thread("plan", cands, spec).weights
    # held now: references alone are enough
    kind, again, _ = answer(handle, cache, message({}))
    assert kind == "ok" and again.weights == plan.weights


def test_the_cache_stays_under_its_bound_but_keeps_what_the_task_uses() -> None:
    cands = [candidate("a", A), candidate("b", B), candidate("c", C)]
    _, refs, profiles = strip(cands)
    sizes = {r: len(pickle.dumps(p, PROTOCOL)) for r, p in profiles.items()}
    cache = AttachmentCache(max_bytes=max(sizes.values()))  # room for one
    for i in range(3):
        sent = {refs[i][0]: pickle.dumps(profiles[refs[i][0]], PROTOCOL)}
        cache.add(sent)
        taken = cache.take([refs[i][0]])
        assert taken[refs[i][0]].mechanism_hash == cands[i].profile.mechanism_hash
        assert list(cache.items) == [refs[i][0]]  # the older ones went
        assert cache.size == sizes[refs[i][0]] <= cache.max_bytes
    # a task needing more than the bound keeps all it needs, over the bound for now
    sent = {r: pickle.dumps(profiles[r], PROTOCOL) for r, _ in refs}
    cache.add(sent)
    taken = cache.take([r for r, _ in refs])
    assert [taken[r].mechanism_hash for r, _ in refs] == [c.profile.mechanism_hash for c in cands]
    assert len(cache.items) == 3 and cache.size > cache.max_bytes
